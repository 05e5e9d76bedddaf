//! Who a client is, for the operator who finds its owner id on a lock: each client registers
//! its host, process, program, library version and optional name under one key of its own,
//! `latchkey_client:{<client id>}` (a hash), kept alive by the watchdog while the client holds
//! anything and expiring a watchdog timeout after that (no cost per lock).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::conn::Conn;
use crate::error::Result;
use crate::scripts::{self, Invoke};
use crate::Client;

/// What a latchkey client registered about itself: see [`Client::client_info`].
///
/// # Examples
///
/// ```no_run
/// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
/// let status = client.lock("orders:1001").status().await?;
/// for holder in &status.holders {
///     match client.client_info(&holder.owner).await? {
///         Some(info) => println!("{} is {info}", holder.owner),
///         None => println!("{} is unknown (a Java client, or gone)", holder.owner),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client id: the part of its owner ids before the first `:`.
    pub id: String,
    /// The name given with [`ClientBuilder::client_name`](crate::ClientBuilder::client_name).
    pub name: Option<String>,
    /// The host name of the machine it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its program (the executable's file name).
    pub program: String,
    /// The library and its version, e.g. `latchkey-redis 0.1.0`.
    pub version: String,
}

impl fmt::Display for ClientInfo {
    /// `name (program, pid 4242 on host, latchkey-redis 0.1.0)`, without the name if none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name} (")?;
        }
        write!(
            f,
            "{}, pid {} on {}, {}",
            self.program, self.pid, self.host, self.version
        )?;
        if self.name.is_some() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The key of client `id`'s registration (no namespace: it belongs to the process).
fn key(id: &str) -> String {
    format!("latchkey_client:{{{id}}}")
}

/// One client's registration, written by [`Registration::refresh`].
#[derive(Debug)]
pub(crate) struct Registration {
    key: String,
    /// Field, value, field, value…
    fields: Vec<String>,
}

impl Registration {
    pub(crate) fn new(id: &str, name: Option<&str>) -> Registration {
        let program = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown".to_owned());
        let mut fields = vec![
            "host".to_owned(),
            gethostname::gethostname().to_string_lossy().into_owned(),
            "pid".to_owned(),
            std::process::id().to_string(),
            "program".to_owned(),
            program,
            "version".to_owned(),
            concat!("latchkey-redis ", env!("CARGO_PKG_VERSION")).to_owned(),
        ];
        if let Some(name) = name {
            fields.extend(["name".to_owned(), name.to_owned()]);
        }
        Registration {
            key: key(id),
            fields,
        }
    }

    /// Writes the registration, to live `ttl`. Best effort: a failure is logged and the next
    /// refresh tries again (an ACL without the key, a stalled server).
    pub(crate) async fn refresh(self: Arc<Self>, conn: Conn, ttl: Duration) {
        let mut invocation = scripts::CLIENT_REGISTER.invocation();
        invocation.key(&self.key).arg(ttl.as_millis() as u64);
        for field in &self.fields {
            invocation.arg(field);
        }
        let result: Result<i64> = conn
            .script(&invocation, "registering the client", &self.key)
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e.chain(), "latchkey could not register the client");
        }
    }
}

impl Client {
    /// What the client that uses the owner id `owner` (a holder's `<client id>:<n>`, or a bare
    /// client id) registered about itself: host, process id, program, library version and
    /// name. `Ok(None)` for an owner that is not a live latchkey client: a Redisson (Java)
    /// client, or one that stopped more than a watchdog timeout ago. A client registers while
    /// it holds anything, kept alive by its watchdog.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, and [`Error::WrongType`](crate::Error::WrongType) if the key holds
    /// something else.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let guard = client.lock("orders:1001").lock().await?;
    /// let me = client.client_info(guard.owner_id()).await?;
    /// println!("held by {}", me.map_or("unknown".to_owned(), |info| info.to_string()));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn client_info(&self, owner: &str) -> Result<Option<ClientInfo>> {
        // An owner id is `<client id>:<n>` (a write hold's field `<client id>:<n>:write`); a
        // client id (a UUID) has no `:`.
        let id = owner.split_once(':').map_or(owner, |(id, _)| id);
        let key = key(id);
        let fields: Vec<(String, String)> = self
            .inner
            .conn
            .query(
                redis::cmd("HGETALL").arg(&key),
                "reading a client's registration",
                &key,
            )
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let mut info = ClientInfo {
            id: id.to_owned(),
            name: None,
            host: String::new(),
            pid: 0,
            program: String::new(),
            version: String::new(),
        };
        for (field, value) in fields {
            match field.as_str() {
                "name" => info.name = Some(value),
                "host" => info.host = value,
                "pid" => info.pid = value.parse().unwrap_or(0),
                "program" => info.program = value,
                "version" => info.version = value,
                _ => {}
            }
        }
        Ok(Some(info))
    }
}
