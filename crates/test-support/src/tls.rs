//! Throw-away TLS material made with the `openssl` command-line tool.

use std::path::{Path, PathBuf};
use std::process::Command;

use redis::{ClientTlsConfig, TlsCertificates};
use tempfile::TempDir;

use crate::util::binary;

/// Installs rustls' `ring` crypto provider as the process default, if no provider is
/// installed yet.
///
/// redis-rs builds its rustls configuration with `rustls::ClientConfig::builder()`, which
/// needs a process-wide provider. Everything in this crate that builds a TLS client calls
/// this first; call it yourself before building a TLS `redis::Client` by other means.
pub fn install_crypto_provider() {
    // An error only means a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

const OPENSSL_CONF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = latchkey-test
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A self-signed CA with a server certificate (SAN `127.0.0.1` and `localhost`) and a client
/// certificate signed by it, as PEM files in a temporary directory that is deleted on drop.
///
/// Keys are ECDSA P-256 (fast to make); certificates are valid for ten years. Servers copy
/// the files they need into their own directory, so a server may outlive its `TlsFiles`.
#[derive(Debug)]
pub struct TlsFiles {
    dir: TempDir,
}

impl TlsFiles {
    /// Makes a new CA, server certificate and client certificate.
    ///
    /// # Panics
    ///
    /// If the `openssl` command fails (its output is in the message).
    pub fn generate() -> TlsFiles {
        Self::generate_named("latchkey test CA")
    }

    /// Makes a complete, independent set of files under a *different* CA, for "certificate
    /// mismatch" tests: a client trusting only [`TlsFiles::ca_cert`] of this set rejects a
    /// server using another set's [`TlsFiles::server_cert`], and a server trusting another
    /// set's CA rejects this set's [`TlsFiles::client_cert`].
    ///
    /// # Panics
    ///
    /// As [`TlsFiles::generate`].
    pub fn generate_other_ca() -> TlsFiles {
        Self::generate_named("latchkey OTHER test CA")
    }

    fn generate_named(ca_name: &str) -> TlsFiles {
        install_crypto_provider();
        let dir = tempfile::Builder::new()
            .prefix("latchkey-tls-")
            .tempdir()
            .expect("create a temporary directory for TLS files");
        let files = TlsFiles { dir };
        let conf = files.path("openssl.cnf");
        std::fs::write(&conf, OPENSSL_CONF).expect("write openssl.cnf");
        let conf = conf.to_string_lossy().into_owned();
        let p = |name: &str| files.path(name).to_string_lossy().into_owned();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

        files.openssl(
            &[
                &["req", "-x509", "-new", "-nodes"][..],
                &ec,
                &[
                    "-keyout",
                    &p("ca.key"),
                    "-out",
                    &p("ca.crt"),
                    "-days",
                    "3650",
                    "-config",
                    &conf,
                    "-extensions",
                    "v3_ca",
                    "-subj",
                    &format!("/CN={ca_name}"),
                ],
            ]
            .concat(),
        );
        for (name, cn, extensions, serial) in [
            ("server", "localhost", "v3_server", "0x5e1f0001"),
            ("client", "latchkey-test-client", "v3_client", "0x5e1f0002"),
        ] {
            let key = p(&format!("{name}.key"));
            let csr = p(&format!("{name}.csr"));
            let crt = p(&format!("{name}.crt"));
            files.openssl(
                &[
                    &["req", "-new", "-nodes"][..],
                    &ec,
                    &[
                        "-keyout",
                        &key,
                        "-out",
                        &csr,
                        "-config",
                        &conf,
                        "-subj",
                        &format!("/CN={cn}"),
                    ],
                ]
                .concat(),
            );
            files.openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-set_serial",
                serial,
                "-days",
                "3650",
                "-out",
                &crt,
                "-extfile",
                &conf,
                "-extensions",
                extensions,
            ]);
        }
        files
    }

    fn openssl(&self, args: &[&str]) {
        let program = binary("LATCHKEY_OPENSSL", "openssl");
        let output = Command::new(&program)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{program}`: {e}"));
        if !output.status.success() {
            panic!(
                "`{program} {}` failed ({}):\n{}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM).
    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The CA's private key (PEM, PKCS#8).
    pub fn ca_key(&self) -> PathBuf {
        self.path("ca.key")
    }

    /// The server certificate (PEM), valid for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> PathBuf {
        self.path("server.crt")
    }

    /// The server's private key (PEM, PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    /// The client certificate (PEM), for mutual TLS.
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.crt")
    }

    /// The client's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    /// redis-rs certificates that trust this CA and present this client certificate; use
    /// with `redis::Client::build_with_tls("rediss://127.0.0.1:PORT", ..)`.
    pub fn certificates(&self) -> TlsCertificates {
        install_crypto_provider();
        TlsCertificates {
            client_tls: Some(ClientTlsConfig {
                client_cert: read(&self.client_cert()),
                client_key: read(&self.client_key()),
            }),
            root_cert: Some(read(&self.ca_cert())),
        }
    }

    /// redis-rs certificates that trust this CA and present no client certificate.
    pub fn root_certificates(&self) -> TlsCertificates {
        install_crypto_provider();
        TlsCertificates {
            client_tls: None,
            root_cert: Some(read(&self.ca_cert())),
        }
    }
}

pub(crate) fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
