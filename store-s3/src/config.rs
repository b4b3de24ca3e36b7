//! Where a store lives (`s3://bucket/prefix`) and how to reach it.

use prox_engine::{Error, Result};
use std::time::Duration;

/// A bucket and a key prefix, parsed from `s3://bucket/prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The bucket name.
    pub bucket: String,
    /// Key prefix without leading or trailing `/` (empty: the bucket root).
    pub prefix: String,
}

/// True when `s` names an S3 store (`s3://...`) rather than a directory.
pub fn is_s3_url(s: &str) -> bool {
    s.starts_with("s3://")
}

impl Location {
    /// Parses `s3://bucket[/prefix]`. The bucket follows the S3 naming
    /// rules' character set (lower-case letters, digits, `-`, `.`; 3..=63
    /// bytes); the prefix's segments are non-empty and free of control
    /// characters.
    pub fn parse(url: &str) -> Result<Location> {
        let bad = |why: &str| Error::InvalidConfig(format!("store URL {url:?}: {why}"));
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| bad("expected s3://bucket/prefix"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(bad(
                "bucket names are 3 to 63 lower-case letters, digits, '-' or '.'",
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty()
            && prefix.split('/').any(|seg| {
                seg.is_empty() || seg == "." || seg == ".." || seg.chars().any(char::is_control)
            })
        {
            return Err(bad(
                "empty, '.' or '..' segment, or a control character, in the prefix",
            ));
        }
        Ok(Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// How to open an [`S3Store`](crate::S3Store).
///
/// Credentials, region and endpoint come from the standard AWS environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`; web identity and
/// container credentials as the AWS SDKs read them) unless set here.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Bucket and prefix.
    pub location: Location,
    /// Endpoint URL of an S3-compatible service (`None`: from the
    /// environment, else AWS). An `http://` endpoint allows plain HTTP.
    pub endpoint: Option<String>,
    /// Region (`None`: from the environment, else `us-east-1`).
    pub region: Option<String>,
    /// Most requests in flight at once for one batch call.
    pub concurrency: usize,
    /// Retries of one request on throttling, 5xx and connection errors,
    /// with exponential backoff (100 ms doubling up to 15 s).
    pub max_retries: usize,
    /// Longest time spent retrying one request.
    pub retry_timeout: Duration,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
    /// Garbage collection removes an unreachable block only when its
    /// object is older than this (see docs/store.md, "S3"): a writer on
    /// another machine must publish its root within this time of putting
    /// its blocks.
    pub gc_grace: Duration,
}

/// Default [`Config::gc_grace`]: one hour.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);

impl Config {
    /// Defaults for a location: 32 requests in flight, 10 retries within
    /// 3 minutes, 30 s per request, one hour of GC grace.
    pub fn new(location: Location) -> Config {
        Config {
            location,
            endpoint: None,
            region: None,
            concurrency: 32,
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            gc_grace: DEFAULT_GC_GRACE,
        }
    }

    /// [`Config::new`] of a parsed `s3://bucket/prefix`.
    pub fn from_url(url: &str) -> Result<Config> {
        Ok(Config::new(Location::parse(url)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_prefix() {
        let l = Location::parse("s3://my-bucket/a/b/").unwrap();
        assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("my-bucket", "a/b"));
        assert_eq!(l.to_string(), "s3://my-bucket/a/b");
        let l = Location::parse("s3://bkt").unwrap();
        assert_eq!(l.prefix, "");
        assert_eq!(l.to_string(), "s3://bkt");
        for bad in [
            "bkt/x",
            "s3://",
            "s3://B",
            "s3://ab",
            "s3://bkt/a//b",
            "s3://bkt/../x",
            "s3://bkt/a\nb",
        ] {
            assert!(
                matches!(Location::parse(bad), Err(Error::InvalidConfig(_))),
                "{bad:?}"
            );
        }
        assert!(is_s3_url("s3://x") && !is_s3_url("/data/s3"));
    }
}
