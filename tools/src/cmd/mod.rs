//! The command line: [`Cli`], its subcommands, and [`run`].
//!
//! Each subcommand lives in its own module exposing a `#[derive(clap::Args)]`
//! struct and `pub fn run(&Args) -> anyhow::Result<()>`. A subcommand is
//! listed here only once it does real work.

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub mod accel;
pub mod bench;
pub mod bench_churn;
pub mod bench_kernels;
pub mod bench_serve;
pub mod bench_sync;
pub mod build;
pub mod completions;
pub mod daemon;
pub mod datagen;
pub mod demo;
pub mod gc;
pub mod index;
pub mod inspect;
pub mod man;
pub mod query;
pub mod roots;
pub mod serve;
pub mod store_arg;
pub mod sync;
pub mod tree;
pub mod update;
pub mod verify;

/// Top-level examples shown by `prox --help`.
const EXAMPLES: &str = "\
Examples:
  prox demo                                   generate data, build, search, report
  prox datagen --n 100000 --dim 128 --queries 1000 --out data/

Environment:
  RUST_LOG     log filter for diagnostics on stderr (e.g. RUST_LOG=prox=debug)
  PROX_ISA     force a kernel ISA: scalar|portable|avx2|neon

Exit status: 0 success, 1 failure (error on stderr), 2 usage error.";

/// `prox`: a content-addressed vector search engine.
#[derive(Debug, Parser)]
#[command(
    name = "prox",
    version,
    about = "prox: content-addressed vector search with exact, filtered and accelerated paths",
    after_help = EXAMPLES,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Options accepted by every subcommand.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Hide progress bars and informational messages on stderr.
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
}

/// Every subcommand, in help order.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a proximity map from a vector file and publish it under a name.
    #[command(after_help = build::EXAMPLES)]
    Build(build::BuildArgs),
    /// Audit a whole named map; report the first broken object.
    #[command(after_help = verify::EXAMPLES)]
    Verify(verify::VerifyArgs),
    /// Build, edit and read ordered prolly trees (CRAB nodes).
    #[command(after_help = tree::EXAMPLES)]
    Tree(tree::TreeArgs),
    /// List, set and compare-and-swap named roots.
    #[command(after_help = roots::EXAMPLES)]
    Roots(roots::RootsArgs),
    /// Reclaim blocks no named root or pin reaches.
    #[command(after_help = gc::EXAMPLES)]
    Gc(gc::GcArgs),
    /// Run k-NN queries against a named map.
    #[command(after_help = query::EXAMPLES)]
    Query(query::QueryArgs),
    /// Apply a JSON-lines batch of puts and deletes to a named map.
    #[command(after_help = update::EXAMPLES)]
    Update(update::UpdateArgs),
    /// Build HNSW/PQ sidecars for an existing map.
    #[command(after_help = accel::EXAMPLES)]
    Accel(accel::AccelArgs),
    /// List, add and drop a map's payload field indexes.
    #[command(after_help = index::EXAMPLES)]
    Index(index::IndexArgs),
    /// Generate data, build an index, search it every way, report (start here).
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Benchmark a map (recall vs QPS), kernels, or plot saved results.
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::BenchArgs),
    /// Decode any stored object (nodes, descriptors, manifests, envelopes).
    #[command(after_help = inspect::EXAMPLES)]
    Inspect(inspect::InspectArgs),
    /// Generate a seeded Gaussian-mixture dataset with exact ground truth.
    #[command(after_help = datagen::EXAMPLES)]
    Datagen(datagen::DatagenArgs),
    /// Run the sync daemon: serve and replicate named roots over libp2p.
    #[command(after_help = daemon::EXAMPLES)]
    Daemon(daemon::DaemonArgs),
    /// Serve the maps of a store over HTTP/JSON (search, batch search, records, metrics).
    #[command(after_help = serve::EXAMPLES)]
    Serve(serve::ServeArgs),
    /// Pull, push, status and peers, through a running daemon or one-shot.
    #[command(after_help = sync::EXAMPLES)]
    Sync(sync::SyncArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    #[command(after_help = completions::EXAMPLES)]
    Completions(completions::CompletionsArgs),
    /// Print the manual page (roff), or write every page into a directory.
    #[command(after_help = man::EXAMPLES)]
    Man(man::ManArgs),
}

/// Subcommand groups for the top-level help, by task.
const GROUPS: &[(&str, &[&str])] = &[
    ("Index", &["build", "query", "update", "accel", "index"]),
    ("Benchmark", &["demo", "bench", "datagen"]),
    ("Storage", &["inspect", "verify", "tree", "roots", "gc"]),
    ("Network", &["daemon", "serve", "sync"]),
    ("Setup", &["completions", "man"]),
];

/// The clap command with the top-level subcommand list grouped by task.
pub fn command() -> clap::Command {
    let cmd = Cli::command();
    let mut listing = String::new();
    let width = cmd
        .get_subcommands()
        .map(|s| s.get_name().len())
        .max()
        .unwrap_or(0);
    let mut listed = std::collections::HashSet::new();
    let mut push_group = |title: &str, names: &mut dyn Iterator<Item = &clap::Command>| {
        let mut body = String::new();
        for s in names {
            listed.insert(s.get_name().to_string());
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            body.push_str(&format!("  {:<width$}  {}\n", s.get_name(), about));
        }
        if !body.is_empty() {
            listing.push_str(&format!("{title}:\n{body}\n"));
        }
    };
    for (title, names) in GROUPS {
        let mut it = names.iter().filter_map(|n| cmd.find_subcommand(n));
        push_group(title, &mut it);
    }
    let rest: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !GROUPS.iter().any(|(_, ns)| ns.contains(&s.get_name())))
        .cloned()
        .collect();
    push_group("Other", &mut rest.iter());
    let template = format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}Options:\n{{options}}{{after-help}}"
    );
    cmd.help_template(template)
}

/// Parses the process arguments (help, version and usage errors are
/// returned as the clap error, which knows its exit code).
pub fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first item is the program name).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Parses a metric name for clap: `l2`, `cosine`, `ip` (and the aliases
/// of [`Metric::from_name`]).
pub fn parse_metric(s: &str) -> Result<prox_kernels::Metric, String> {
    prox_kernels::Metric::from_name(s)
        .ok_or_else(|| format!("unknown metric {s:?} (expected l2, cosine or ip)"))
}

/// Installs the tracing subscriber: `RUST_LOG` filter (default `warn`),
/// output on stderr.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Accel(a) => accel::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Build(a) => build::run(a),
        Command::Datagen(a) => datagen::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Daemon(a) => daemon::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Sync(a) => sync::run(a),
        Command::Gc(a) => gc::run(a),
        Command::Index(a) => index::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Query(a) => query::run(a),
        Command::Update(a) => update::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Tree(a) => tree::run(a.clone()),
        Command::Roots(a) => roots::run(a.clone()),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn help_groups_subcommands_by_task() {
        let help = command().render_help().to_string();
        assert!(help.contains("Benchmark:"), "{help}");
        assert!(help.contains("datagen"), "{help}");
    }
}
