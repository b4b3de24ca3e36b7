use super::proto::{self, Frame};
use super::*;
use crate::codec::Reader;
use crate::store::{BlockStore, MemStore, Pins};
use crate::Error;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

fn owner(dir: &std::path::Path) -> (Arc<MemStore>, OwnerSocket) {
    let store = Arc::new(MemStore::new());
    let sock = OwnerSocket::start(dir, store.clone(), Pins::new(), "test").unwrap();
    (store, sock)
}

#[test]
fn blocks_and_roots_round_trip_through_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (store, sock) = owner(dir.path());
    let c = OwnerClient::connect(sock.path(), DEFAULT_TIMEOUT).unwrap();
    assert_eq!(c.info().kind, "test");
    assert_eq!(c.info().pid, std::process::id());
    let cids = c.put_many(&[b"a", b"bb"]).unwrap();
    assert_eq!(cids[0], crate::Cid::of(b"a"));
    assert!(store.has(&cids[1]).unwrap());
    assert_eq!(&c.get(&cids[1]).unwrap().unwrap()[..], b"bb");
    assert_eq!(c.has_many(&cids).unwrap(), vec![true, true]);
    assert!(c.cas_root("m", None, Some(b"v1")).unwrap());
    assert!(
        !c.cas_root("m", None, Some(b"v2")).unwrap(),
        "stale expected"
    );
    assert!(store.cas_root("m", Some(b"v1"), Some(b"v2")).unwrap());
    assert_eq!(&c.root("m").unwrap().unwrap()[..], b"v2");
    assert_eq!(c.roots().unwrap().len(), 1);
    c.commit().unwrap();
    // An owner-side failure arrives typed, with the owner's message.
    let e = c.set_root("", Some(b"x")).unwrap_err();
    assert!(matches!(e, Error::OwnerRefused { .. }), "{e}");
    // The owner decodes root values during a collection: junk is refused.
    assert!(matches!(c.gc(true), Err(Error::OwnerRefused { .. })));
    c.set_root("m", None).unwrap();
    let rep = c.gc(false).unwrap();
    assert!(!rep.dry_run);
    assert_eq!(rep.retained.removed_blocks, 2);
    assert!(!store.has(&cids[0]).unwrap());
    assert!(c.retain(&Default::default()).is_err());
}

#[test]
fn a_dead_owner_is_a_clear_error_and_its_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let e = OwnerClient::connect(&path, Duration::from_secs(2)).unwrap_err();
    assert!(matches!(e, Error::Owner { .. }), "{e}");
    let (_s, sock) = owner(dir.path());
    assert!(OwnerClient::connect(sock.path(), DEFAULT_TIMEOUT).is_ok());
    let second = OwnerSocket::start(dir.path(), Arc::new(MemStore::new()), Pins::new(), "x");
    assert!(matches!(second, Err(Error::Owner { .. })));
    drop(sock);
    assert!(!path.exists(), "clean exit removes the socket");
}

#[test]
fn an_owner_that_never_answers_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    let _listener = UnixListener::bind(&path).unwrap();
    let e = OwnerClient::connect(&path, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(e, Error::Owner { .. }), "{e}");
    assert!(e.to_string().contains("no reply"), "{e}");
}

fn raw_reply(stream: &mut UnixStream) -> (u64, u8, String) {
    let Frame::Body(b) = proto::read_frame(stream).unwrap() else {
        panic!("closed")
    };
    let mut r = Reader::new(&b, "reply");
    let id = proto::read_header(&mut r).unwrap();
    let status = r.u8().unwrap();
    let msg = if status == 1 {
        proto::string(&mut r).unwrap()
    } else {
        String::new()
    };
    (id, status, msg)
}

#[test]
fn malformed_and_oversized_frames_get_typed_failures() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, sock) = owner(dir.path());
    let mut s = UnixStream::connect(sock.path()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Wrong version.
    proto::write_frame(&mut s, &[9, 0, 0, 0, 0, 0, 0, 0, 1, 0]).unwrap();
    let (id, status, msg) = raw_reply(&mut s);
    assert_eq!((id, status), (0, 1));
    assert!(msg.contains("version 9"), "{msg}");
    // Unknown op, then trailing bytes after a hello: the id is echoed.
    let mut body = proto::header(7);
    body.push(200);
    proto::write_frame(&mut s, &body).unwrap();
    let (id, status, msg) = raw_reply(&mut s);
    assert_eq!((id, status), (7, 1));
    assert!(msg.contains("unknown op"), "{msg}");
    let mut body = proto::header(8);
    body.extend_from_slice(&[0, 1, 2]);
    proto::write_frame(&mut s, &body).unwrap();
    assert_eq!(raw_reply(&mut s).1, 1);
    // A list length that cannot fit.
    let mut body = proto::header(9);
    body.push(1);
    crate::codec::put_uv(&mut body, 1 << 40);
    proto::write_frame(&mut s, &body).unwrap();
    assert_eq!(raw_reply(&mut s).1, 1);
    // Oversized: refused before allocation, then the connection closes.
    s.write_all(&(u32::MAX).to_be_bytes()).unwrap();
    let (_, status, msg) = raw_reply(&mut s);
    assert_eq!(status, 1);
    assert!(msg.contains("exceeds"), "{msg}");
    assert!(matches!(
        proto::read_frame(&mut s),
        Ok(Frame::Closed) | Err(_)
    ));
    // The owner still serves new connections.
    assert!(OwnerClient::connect(sock.path(), DEFAULT_TIMEOUT).is_ok());
}

#[test]
fn a_lease_through_the_socket_excludes_the_owner_until_released_or_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let (store, sock) = owner(dir.path());
    let short = Duration::from_millis(50);
    let c = OwnerClient::connect(sock.path(), DEFAULT_TIMEOUT).unwrap();
    let lease = c.lease("m", short).unwrap().expect("a memory owner leases");
    // The owner's own writers (and other clients) wait for it.
    let e = store.lease("m", short).unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e}");
    let other = OwnerClient::connect(sock.path(), DEFAULT_TIMEOUT).unwrap();
    let e = other.lease("m", short).unwrap_err();
    assert!(
        matches!(e, Error::Busy { ref name, .. } if name == "m"),
        "{e}"
    );
    // Another name is free; the holder's own requests still run.
    drop(store.lease("n", short).unwrap());
    assert!(c.cas_root("m", None, Some(b"v1")).unwrap());
    drop(lease);
    drop(store.lease("m", short).unwrap().expect("released"));
    // A client that goes away without releasing frees the name too.
    let mut raw = UnixStream::connect(sock.path()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut body = proto::header(1);
    body.push(proto::Op::Lease as u8);
    crate::codec::put_blob(&mut body, b"m");
    crate::codec::put_uv(&mut body, 50);
    proto::write_frame(&mut raw, &body).unwrap();
    let Frame::Body(reply) = proto::read_frame(&mut raw).unwrap() else {
        panic!("closed")
    };
    assert_eq!(reply.last(), Some(&1), "the raw client holds the lease");
    assert!(store.lease("m", short).is_err());
    drop(raw);
    let freed = store.lease("m", Duration::from_secs(30));
    assert!(freed.is_ok(), "the owner keeps a dead connection's lease");
}
