//! A `rediss://` client in a process where nobody installed a rustls crypto provider: latchkey
//! installs none itself (that is the application's choice), so connecting fails with a typed
//! error that says what to install, rather than the driver's panic; once the application
//! installed one, TLS is set up. Its own test binary: the provider is process-wide.

use std::time::Duration;

use latchkey_redis::Client;

#[tokio::test]
async fn tls_without_a_crypto_provider_is_a_config_error_not_a_panic() {
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    // Nothing listens there: nothing is sent before the provider is checked.
    let url = "rediss://127.0.0.1:1";
    let connect = || {
        Client::builder(url)
            .connect_timeout(Duration::from_millis(500))
            .connect()
    };
    let err = connect().await.expect_err("no provider");
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string().contains("no rustls crypto provider"),
        "{err}"
    );
    assert!(err.to_string().contains("install_default()"), "{err}");
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "the library installed a provider"
    );
    let lazy = Client::builder(url)
        .connect_lazy()
        .expect_err("no provider");
    assert!(lazy.is_config(), "{lazy}");

    // The application's choice, once: then the connection itself is tried (and refused).
    rustls::crypto::ring::default_provider()
        .install_default()
        .expect("first install");
    let err = connect().await.expect_err("nothing listens");
    assert!(err.is_connection(), "{err}");
}
