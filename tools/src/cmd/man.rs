//! `prox man`: the manual pages, rendered as roff from the clap definition
//! that parses the command line.

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Examples for `prox man --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox man | man -l -                          read prox(1) now
  prox man --out-dir ~/.local/share/man/man1   prox.1 and one page per subcommand
  prox man > prox.1";

/// Arguments of `prox man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write `prox.1` and a page per subcommand (`prox-build.1`, ...) into
    /// this directory instead of printing `prox.1` on stdout. The directory
    /// is created if missing.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Prints `prox.1`, or writes every page into `--out-dir`.
pub fn run(args: &ManArgs) -> Result<()> {
    match &args.out_dir {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&page()?)?;
            out.flush()?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(super::command(), dir)
                .with_context(|| format!("cannot write manual pages into {}", dir.display()))?;
        }
    }
    Ok(())
}

/// The roff source of `prox.1`.
pub fn page() -> Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(super::command()).render(&mut page)?;
    Ok(page)
}
