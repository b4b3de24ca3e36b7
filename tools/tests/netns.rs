//! Real `prox daemon`s in separate network namespaces: five nodes on a
//! bridge, every pull of the client through a userspace relay (rate cap and
//! delay; kernel netem is not available), a source killed and another
//! partitioned mid-pull, and signed roots refused from a stale mirror, a
//! publisher the client does not trust and a mirror whose record expired.
//!
//! Needs root and iproute2 (`ip netns`, veth, bridge). Where namespaces
//! cannot be created the test prints `SKIPPED` with the reason and passes,
//! unless `PROX_NETNS=require` (set by `.ci/run`), which makes it fail.
//! Every wait is bounded in time.

mod common;

use common::{ok, prox, run, s};
use prox_sync::bench::{CountingProxy, Link};
use std::io::BufRead;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `ip ARGS`; the error names the command and its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    match o.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}

/// Network namespaces on one bridge in the root namespace, which holds the
/// gateway address (where the relays listen). Removed on drop.
struct Lab {
    tag: String,
    /// The /24 as `10.201.N`.
    net: String,
    nodes: usize,
}

impl Lab {
    /// `nodes` namespaces `<tag>-<i>` at `10.201.N.(i+2)`, the bridge at
    /// `.1`.
    fn create(nodes: usize) -> Result<Lab, String> {
        let pid = std::process::id();
        let mut lab = Lab {
            tag: format!("px{:05x}", pid & 0xfffff),
            net: format!("10.201.{}", pid % 250 + 1),
            nodes: 0,
        };
        let br = lab.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", lab.gateway()), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..nodes {
            let ns = lab.ns(i);
            ip(&["netns", "add", &ns])?;
            lab.nodes = i + 1;
            let (host, inner) = (lab.host_if(i), format!("{}n{i}", lab.tag));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &host, "master", &br])?;
            ip(&["link", "set", &host, "up"])?;
            let addr = format!("{}/24", lab.ip(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    fn ns(&self, i: usize) -> String {
        format!("{}-{i}", self.tag)
    }

    fn host_if(&self, i: usize) -> String {
        format!("{}h{i}", self.tag)
    }

    fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.net, i + 2)
    }

    fn gateway(&self) -> String {
        format!("{}.1", self.net)
    }

    /// Cuts node `i` off (its link goes down: packets vanish, connections
    /// stay open and stall) or joins it again.
    fn link(&self, i: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.host_if(i), state]).expect("set link state");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for i in 0..self.nodes {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// The lab, or `None` (after printing why) where namespaces cannot be made.
fn lab(nodes: usize) -> Option<Lab> {
    match Lab::create(nodes) {
        Ok(l) => Some(l),
        Err(why) if std::env::var("PROX_NETNS").as_deref() == Ok("require") => {
            panic!("PROX_NETNS=require but network namespaces cannot be created: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED netns test: cannot create network namespaces ({why}); run as root with iproute2");
            None
        }
    }
}

/// A `prox daemon` in a namespace, listening on port 4001 of its address.
struct Node {
    child: Child,
    peer: String,
    /// `/ip4/A/tcp/4001/p2p/<peer>`.
    addr: String,
    store: PathBuf,
}

impl Node {
    fn start(lab: &Lab, i: usize, store: &Path, extra: &[&str]) -> Node {
        let listen = format!("/ip4/{}/tcp/4001", lab.ip(i));
        let mut child = Command::new("ip")
            .args(["netns", "exec", &lab.ns(i), env!("CARGO_BIN_EXE_prox")])
            .args(["daemon", "--store", s(store), "--listen", &listen])
            .args(extra)
            .env_remove("PROX_STORE")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("daemon starts");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut peer = String::new();
        // peer_id, listen and control lines, then nothing more on stdout.
        for line in out.lines().take(8) {
            let line = line.expect("daemon stdout");
            if let Some(p) = line.strip_prefix("peer_id ") {
                peer = p.trim().to_string();
            }
            if line.starts_with("control ") {
                break;
            }
        }
        assert!(
            !peer.is_empty(),
            "daemon in {} printed its peer id",
            lab.ns(i)
        );
        Node {
            child,
            addr: format!("{listen}/p2p/{peer}"),
            peer,
            store: store.to_path_buf(),
        }
    }

    /// Its address as reached through `relay`.
    fn via(&self, relay: &CountingProxy) -> String {
        let a = relay.addr();
        format!("/ip4/{}/tcp/{}/p2p/{}", a.ip(), a.port(), self.peer)
    }

    /// SIGKILL, no clean shutdown.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The root CID `name` names in `store` (read-only; fine beside a daemon).
fn root(store: &Path, name: &str) -> Option<String> {
    let out = ok(&["roots", "list", "--store", s(store)]);
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(n, _)| *n == name)
        .map(|(_, r)| r.to_string())
}

/// Waits up to `limit` for `store`'s `name` to name `want`.
fn wait_root(store: &Path, name: &str, want: &str, limit: Duration) {
    let start = Instant::now();
    while root(store, name).as_deref() != Some(want) {
        assert!(
            start.elapsed() < limit,
            "{} did not reach {want} for {name:?} within {limit:?} (has {:?})",
            store.display(),
            root(store, name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `prox sync pull` of `name` into the daemon of `store` from `peers`.
fn pull(store: &Path, name: &str, peers: &[String]) -> std::process::Output {
    let mut args = vec![
        "sync",
        "pull",
        "--store",
        s(store),
        "--name",
        name,
        "--json",
    ];
    for p in peers {
        args.extend_from_slice(&["--peer", p]);
    }
    run(&args)
}

fn datagen(out: &Path, n: usize, seed: u64) {
    let shape = common::Shape {
        n,
        dim: 32,
        queries: 2,
        k: 5,
    };
    common::datagen(out, shape, &common::seed(seed), &[]);
}

fn build(store: &Path, name: &str, input: &Path) {
    ok(&[
        "build",
        "--store",
        s(store),
        "--name",
        name,
        "--input",
        s(input),
    ]);
}

/// Node indexes in the lab.
const P: usize = 0;
const M1: usize = 1;
const M2: usize = 2;
const Q: usize = 3;
const C: usize = 4;

/// Publisher P signs `m`; mirrors M1 and M2 follow it; Q signs its own `m`
/// and `q` (records valid one second); client C trusts P only and pulls
/// through rate-capped, delayed relays.
#[test]
fn five_daemons_in_namespaces_fail_over_and_refuse_bad_roots() {
    let Some(lab) = lab(5) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = |n: &str| dir.path().join(n);
    let (base, more) = (dir.path().join("base"), dir.path().join("more"));
    datagen(&base, 20_000, 41);
    datagen(&more, 300, 42);
    build(&store("p"), "m", &base.join("base.fvecs"));
    build(&store("q"), "m", &more.join("base.fvecs"));
    build(&store("q"), "q", &more.join("base.fvecs"));
    let v1 = root(&store("p"), "m").expect("P holds m");
    let write = |name: &str, json: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, json).expect("write config");
        p
    };
    let short_records = write("q.json", r#"{"record_validity_secs": 1}"#);
    let quick_stall = write("c.json", r#"{"limits": {"idle_timeout": 3}}"#);

    let p = Node::start(&lab, P, &store("p"), &["--open", "--sign"]);
    let q = Node::start(
        &lab,
        Q,
        &store("q"),
        &["--open", "--sign", "--config", s(&short_records)],
    );
    let follow_p = format!("{}:m", p.addr);
    let mirror_args = ["--open", "--trust", &p.peer, "--follow", &follow_p];
    let mut m1 = Node::start(&lab, M1, &store("m1"), &mirror_args);
    let m2 = Node::start(&lab, M2, &store("m2"), &mirror_args);
    let c = Node::start(
        &lab,
        C,
        &store("c"),
        &["--trust", &p.peer, "--config", s(&quick_stall)],
    );
    let limit = Duration::from_secs(90);
    wait_root(&m1.store, "m", &v1, limit);
    wait_root(&m2.store, "m", &v1, limit);

    // 1. C clones m from P, M1 and M2 at once, each behind a relay capped
    // at 256 KB/s with 10 ms each way; M1 is killed and M2 cut off once
    // both have sent something. The pull completes from P.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let gateway: Ipv4Addr = lab.gateway().parse().expect("gateway address");
    let relay = |node: &Node, i: usize| {
        let target: SocketAddr = format!("{}:4001", lab.ip(i)).parse().expect("target");
        let link = Link {
            bind: SocketAddr::from((gateway, 0)),
            rate: Some(256 << 10),
            delay: Duration::from_millis(10),
        };
        let r = rt
            .block_on(CountingProxy::start_with(target, link))
            .expect("relay starts");
        let addr = node.via(&r);
        (r, addr)
    };
    let (rp, via_p) = relay(&p, P);
    let (rm1, via_m1) = relay(&m1, M1);
    let (rm2, via_m2) = relay(&m2, M2);
    let mut puller = prox()
        .args([
            "sync",
            "pull",
            "--store",
            s(&c.store),
            "--name",
            "m",
            "--json",
        ])
        .args(["--peer", &via_p, "--peer", &via_m1, "--peer", &via_m2])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pull starts");
    let start = Instant::now();
    while rm1.bytes() < 64 << 10 || rm2.bytes() < 64 << 10 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the mirrors did not both start serving (relayed: P {} M1 {} M2 {})",
            rp.bytes(),
            rm1.bytes(),
            rm2.bytes()
        );
        if let Some(st) = puller.try_wait().expect("pull status") {
            panic!("the pull ended ({st}) before both mirrors served 64 KiB");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    m1.kill();
    lab.link(M2, false);
    let out = wait_output(puller, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pull failed: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("pull --json prints one object");
    assert_eq!(report["root"].as_str(), Some(v1.as_str()), "{report}");
    let sources = report["sources"].as_array().expect("per-source report");
    assert_eq!(sources.len(), 3, "{report}");
    let of = |n: &Node| {
        sources
            .iter()
            .find(|x| x["peer"].as_str() == Some(&n.peer))
            .unwrap_or_else(|| panic!("{} missing from {report}", n.peer))
    };
    assert!(of(&p)["error"].is_null(), "P served to the end: {report}");
    assert!(!of(&m1)["error"].is_null(), "killed M1 reported: {report}");
    assert!(!of(&m2)["error"].is_null(), "cut-off M2 reported: {report}");
    let served: u64 = sources.iter().map(|x| x["blocks"].as_u64().unwrap()).sum();
    assert_eq!(Some(served), report["blocks_fetched"].as_u64(), "{report}");
    assert!(of(&m1)["blocks"].as_u64() > Some(0), "{report}");
    assert_eq!(root(&c.store, "m").as_deref(), Some(v1.as_str()));
    ok(&["verify", "m", "--store", s(&c.store)]);

    // 2. M2 joins again and catches P's update through its follow; C takes
    // v2 from M2 (P's record, relayed); M1, restarted on its old copy,
    // serves v1 under P's older record: C refuses the rollback.
    lab.link(M2, true);
    ok(&[
        "update",
        "--store",
        s(&p.store),
        "--name",
        "m",
        "--input",
        s(&more.join("base.fvecs")),
        "--start-key",
        "20000",
    ]);
    let v2 = root(&p.store, "m").expect("P holds m");
    assert_ne!(v1, v2);
    wait_root(&m2.store, "m", &v2, limit);
    let o = pull(&c.store, "m", std::slice::from_ref(&m2.addr));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(root(&c.store, "m").as_deref(), Some(v2.as_str()));
    drop(m1);
    let m1 = Node::start(&lab, M1, &store("m1"), &["--open"]);
    assert_eq!(root(&m1.store, "m").as_deref(), Some(v1.as_str()));
    refused(&c.store, "m", &m1.addr, "rollback");
    assert_eq!(root(&c.store, "m").as_deref(), Some(v2.as_str()));

    // 3. Q signs its own m: C trusts P only.
    refused(&c.store, "m", &q.addr, "not trusted");
    assert_eq!(root(&c.store, "m").as_deref(), Some(v2.as_str()));

    // 4. M1 (trusting nobody, so it keeps any record that verifies)
    // mirrors Q's q with its one-second record; M2, restarted trusting Q,
    // refuses that record from M1 once it has expired.
    let o = pull(&m1.store, "q", std::slice::from_ref(&q.addr));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(m2);
    let m2 = Node::start(&lab, M2, &store("m2"), &["--open", "--trust", &q.peer]);
    std::thread::sleep(Duration::from_millis(2500));
    refused(&m2.store, "q", &m1.addr, "expired");
    assert_eq!(root(&m2.store, "q"), None);
    drop(rt);
}

/// A pull into `store` from `peer` fails naming `why`; nothing is taken.
fn refused(store: &Path, name: &str, peer: &str, why: &str) {
    let o = pull(store, name, &[peer.to_string()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "pull of {name} from {peer} accepted");
    assert!(err.contains(why), "expected {why:?} in: {err}");
}

/// The child's output, killing it after `limit`.
fn wait_output(mut child: Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().expect("child status").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("child still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("child output")
}
