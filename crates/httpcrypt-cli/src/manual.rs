//! `httpcrypt completions SHELL` and `httpcrypt man`: shell completion
//! scripts and man pages, generated from the command's own clap definition
//! (clap_complete, clap_mangen), so they never disagree with `--help`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write httpcrypt.1 and one page per subcommand (httpcrypt-serve.1, ...)
    /// into this directory instead of httpcrypt.1 to stdout.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Prints the completion script for `a.shell`.
pub fn completions(a: CompletionsArgs, mut cmd: clap::Command) -> Result<i32> {
    clap_complete::generate(a.shell, &mut cmd, "httpcrypt", &mut std::io::stdout());
    Ok(0)
}

/// Writes the man page(s).
pub fn man(a: ManArgs, cmd: clap::Command) -> Result<i32> {
    match a.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("writing man pages to {}", dir.display()))?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .context("writing the man page")?;
        }
    }
    Ok(0)
}
