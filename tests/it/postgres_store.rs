//! PostgreSQL, on servers the tests start (see `autoshard_test_support::postgres`): the
//! whole store conformance suite (twice on the same data, since every case uses fresh
//! kinds, and in another schema of the same database), connect errors, and the
//! concurrency scenario every real store runs.

use autoshard::store::postgres::{PostgresOptions, PostgresStore};
use autoshard::store::DocumentStore;
use autoshard::{conformance, Error};
use autoshard_test_support::postgres::Postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite() {
    let server = Postgres::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    assert!(store.cross_group_transactions());
    conformance::run_all(&store).await;
    conformance::run_all(&store).await;
    let other = PostgresOptions::default().schema("second");
    let store = PostgresStore::connect_with(&server.url(), other)
        .await
        .unwrap();
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_schemas_are_refused_without_the_password() {
    let refused = PostgresStore::connect("postgres://app:s3cret@127.0.0.1:1/db").await;
    let error = refused.unwrap_err();
    let message = format!("{error:?}");
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    // `Display` says what failed: the address and the reason, never the password.
    let shown = error.to_string();
    assert!(
        shown.starts_with("store error: connecting to PostgreSQL at 127.0.0.1:1")
            && shown.to_lowercase().contains("refused")
            && !shown.contains("s3cret"),
        "{shown}"
    );
    let refused = PostgresStore::connect("not a url").await;
    assert!(matches!(refused, Err(Error::Invalid(_))));
    let server = Postgres::start();
    let bad = PostgresOptions::default().schema("x; DROP TABLE y");
    let refused = PostgresStore::connect_with(&server.url(), bad).await;
    assert!(matches!(refused, Err(Error::Invalid(_))));
}

/// A server that takes TLS connections only: the store connects through a rustls
/// connector that trusts the server's certificate, and without TLS it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_are_made_with_the_given_connector() {
    use autoshard::store::Document;
    use autoshard::Key;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let server = Postgres::start_tls_only(&cert.cert.pem(), &cert.signing_key.serialize_pem());
    let url = format!("{}?sslmode=require", server.url());

    let plain = PostgresStore::connect(&server.url()).await;
    let refused = format!("{:?}", plain.unwrap_err());
    assert!(refused.contains("pg_hba.conf rejects"), "{refused}");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
    let store = PostgresStore::connect_tls(&url, PostgresOptions::default(), tls)
        .await
        .unwrap();
    let key = Key::new("Tls", "1");
    store.insert(&key, Document::new()).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_some());

    let untrusting = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let refused = PostgresStore::connect_tls(
        &url,
        PostgresOptions::default(),
        tokio_postgres_rustls::MakeRustlsConnect::new(untrusting),
    )
    .await;
    assert!(matches!(refused, Err(Error::Backend { .. })), "{refused:?}");
}

/// The concurrency scenario (64 tasks x 500 votes, naive and sharded, with and without
/// retries) on PostgreSQL, each variant in a schema of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_votes_are_exact() {
    let server = Postgres::start();
    let url = server.url();
    let connect = async |case: &str| {
        let schema = case.replace('-', "_");
        PostgresStore::connect_with(&url, PostgresOptions::default().schema(schema))
            .await
            .unwrap()
    };
    autoshard_test_support::concurrency::all_variants(connect, "postgres").await;
}
