//! `prox completions`: shell completion scripts, generated from the same
//! clap definition that parses the command line, so they never drift.

use anyhow::Result;
use clap::Args;
use clap_complete::Shell;
use std::io::Write;

/// Examples for `prox completions --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox completions bash > ~/.local/share/bash-completion/completions/prox
  prox completions zsh > ~/.zfunc/_prox        (with fpath+=(~/.zfunc) in ~/.zshrc)
  prox completions fish > ~/.config/fish/completions/prox.fish
  prox completions powershell >> $PROFILE
  prox completions elvish >> ~/.config/elvish/rc.elv";

/// Arguments of `prox completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Writes the completion script for `args.shell` to stdout.
pub fn run(args: &CompletionsArgs) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(&script(args.shell))?;
    out.flush()?;
    Ok(())
}

/// The completion script for `shell`. Rendered into memory because
/// clap_complete panics when its writer fails (a closed pipe must not).
pub fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut super::command(), "prox", &mut script);
    script
}
