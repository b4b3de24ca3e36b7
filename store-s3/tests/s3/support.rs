//! The server under test, fresh prefixes, and raw access to the bucket.

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use prox_s3::{Config, Location, S3Store};
use std::sync::Arc;
use std::time::Duration;

/// Where the test server is.
#[derive(Debug, Clone)]
pub struct Server {
    pub endpoint: String,
    pub bucket: String,
}

/// The configured server, or `None` (after saying why) when the test is
/// to be skipped. Panics when `PROX_S3_REQUIRED=1` and none is configured.
pub fn server(test: &str) -> Option<Server> {
    let endpoint = std::env::var("PROX_S3_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    let required = std::env::var("PROX_S3_REQUIRED").is_ok_and(|v| v == "1");
    let Some(endpoint) = endpoint else {
        assert!(
            !required,
            "{test}: PROX_S3_REQUIRED=1 but PROX_S3_ENDPOINT is not set"
        );
        eprintln!(
            "{test}: skipped: no S3 server configured (set PROX_S3_ENDPOINT, or run .ci/s3, which starts one and runs this suite)"
        );
        return None;
    };
    // Without static keys the AWS client would look for instance
    // credentials on the network; the tests talk to loopback only.
    assert!(
        std::env::var("AWS_ACCESS_KEY_ID").is_ok()
            && std::env::var("AWS_SECRET_ACCESS_KEY").is_ok(),
        "{test}: PROX_S3_ENDPOINT is set but AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not"
    );
    let bucket = std::env::var("PROX_S3_BUCKET").unwrap_or_else(|_| "prox-test".into());
    Some(Server { endpoint, bucket })
}

/// A prefix no other test (or run) uses.
pub fn fresh_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t/{test}-{}-{nanos}", std::process::id())
}

impl Server {
    /// Test defaults: no GC grace, quick retries.
    pub fn config(&self, prefix: &str) -> Config {
        self.config_at(&self.endpoint, prefix)
    }

    /// [`config`](Self::config) through another endpoint (a relay).
    pub fn config_at(&self, endpoint: &str, prefix: &str) -> Config {
        let mut c = Config::new(Location {
            bucket: self.bucket.clone(),
            prefix: prefix.to_string(),
        });
        c.endpoint = Some(endpoint.to_string());
        c.gc_grace = Duration::ZERO;
        c.max_retries = 4;
        c.retry_timeout = Duration::from_secs(20);
        c.request_timeout = Duration::from_secs(10);
        c
    }

    /// A fresh, empty store for `test`.
    pub fn store(&self, test: &str) -> S3Store {
        S3Store::open(self.config(&fresh_prefix(test))).unwrap()
    }

    /// A raw client on the bucket, to plant objects the store would never
    /// write.
    pub fn raw(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::from_env()
                .with_bucket_name(&self.bucket)
                .with_endpoint(&self.endpoint)
                .with_allow_http(true)
                .with_region("us-east-1")
                .build()
                .unwrap(),
        )
    }
}

/// Runs `fut` to completion on a fresh current-thread runtime.
pub fn block_on<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(fut)
}
