//! The generic `BlockStore` suite (engine/tests/engine/store_suite.rs), on
//! S3: each behaviour on a fresh prefix.

use crate::store_suite as suite;
use crate::support::server;
use std::sync::Arc;

fn seed() -> u64 {
    prox_testkit::seed(0x5eed_0005)
}

#[test]
fn get_put_has_and_batches() {
    let Some(srv) = server("get_put_has_and_batches") else {
        return;
    };
    suite::get_put_has_and_batches("s3", &srv.store("batches"), seed());
}

#[test]
fn verified_puts_store_blocks_hashed_once() {
    let Some(srv) = server("verified_puts") else {
        return;
    };
    suite::verified_puts_store_blocks_hashed_once("s3", &srv.store("verified"), seed());
}

#[test]
fn roots_set_get_list_and_cas() {
    let Some(srv) = server("roots") else { return };
    suite::roots_set_get_list_and_cas("s3", &srv.store("roots"));
}

#[test]
fn retain_keeps_live_and_removes_the_rest() {
    let Some(srv) = server("retain") else { return };
    suite::retain_keeps_live_and_removes_the_rest("s3", &srv.store("retain"), seed());
}

#[test]
fn concurrent_readers_with_a_writer() {
    let Some(srv) = server("concurrent") else {
        return;
    };
    suite::concurrent_readers_with_a_writer("s3", Arc::new(srv.store("concurrent")), seed(), 200);
}

#[test]
fn gc_default_keeps_published_trees_and_reclaims_the_rest() {
    let Some(srv) = server("gc_default") else {
        return;
    };
    suite::gc_default_keeps_published_trees_and_reclaims_the_rest("s3", &srv.store("gc"), seed());
}
