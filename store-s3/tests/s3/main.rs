//! prox-s3 against a real S3-compatible server on loopback.
//!
//! The server comes from the environment: `PROX_S3_ENDPOINT`
//! (`http://127.0.0.1:PORT`), `PROX_S3_BUCKET` (an existing bucket,
//! default `prox-test`) and the standard `AWS_ACCESS_KEY_ID` /
//! `AWS_SECRET_ACCESS_KEY`. `.ci/s3` starts one (moto's server mode) and
//! runs this suite with `PROX_S3_REQUIRED=1`; without a server every test
//! prints why it is skipped and passes, unless `PROX_S3_REQUIRED=1`, when
//! it fails. `PROX_S3_AUTH_ENDPOINT` names a second server that refuses
//! every key (the auth test). Each test works under its own fresh prefix.

#![allow(unreachable_pub)]

mod cache;
mod cold;
mod faults;
mod relay;
mod same_cids;
#[path = "../../../engine/tests/engine/store_suite.rs"]
mod store_suite;
mod store_suite_runs;
mod support;
