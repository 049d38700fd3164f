//! The configuration file of `serve` and `gateway` (`--config FILE`, TOML).
//!
//! Its keys are the long flags of the command, without the dashes:
//!
//! ```toml
//! command = "gateway"          # optional: the command the file is for
//! listen = "0.0.0.0:8080"
//! keys = "/var/lib/httpcrypt/keys"
//! upstream = "http://127.0.0.1:3000"
//! rotation = 3600
//! no-tickets = false           # a flag: true to set it
//! public = ["/static/**"]      # a repeatable flag: a list
//! log = "info"                 # the global flags too
//! ```
//!
//! The file is turned into flags placed before the command line's, and a
//! flag given twice takes its last value: flags override the file (lists
//! add up). So the file expresses exactly what the flags can, and is
//! checked by the same parser. `httpcrypt check-config FILE` parses it and
//! prints the whole effective configuration, defaults included, in the
//! same format (the output is itself a configuration file that gives the
//! same result).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The commands a file can configure.
pub const COMMANDS: [&str; 2] = ["serve", "gateway"];

/// Reads `path` and returns its `command` (if any) and its settings as flags.
pub fn read(path: &Path) -> Result<(Option<String>, Vec<OsString>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    parse(&text).with_context(|| format!("configuration file {}", path.display()))
}

/// [`read`] of a file's text.
pub fn parse(text: &str) -> Result<(Option<String>, Vec<OsString>)> {
    let table: toml::Table = text.parse()?;
    let mut command = None;
    let mut args = Vec::new();
    for (key, value) in &table {
        if key == "command" {
            let c = value
                .as_str()
                .context("`command` must be a string: \"serve\" or \"gateway\"")?;
            if !COMMANDS.contains(&c) {
                bail!("`command = {c:?}`: a file configures \"serve\" or \"gateway\"");
            }
            command = Some(c.to_string());
            continue;
        }
        if key == "config" {
            bail!("`config` inside a configuration file: files do not include others");
        }
        let flag = format!("--{}", key.replace('_', "-"));
        match value {
            toml::Value::Boolean(true) => args.push(flag.into()),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    args.push(flag.clone().into());
                    args.push(scalar(key, item)?.into());
                }
            }
            v => {
                args.push(flag.into());
                args.push(scalar(key, v)?.into());
            }
        }
    }
    Ok((command, args))
}

fn scalar(key: &str, v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        _ => bail!("`{key}`: a string, a number, a boolean or a list of them"),
    })
}

/// The command line with `--config FILE` (of `serve` or `gateway`)
/// expanded: the file's flags go right after the command name, before the
/// command line's own, which therefore win.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(cmd_at) = args
        .iter()
        .position(|a| a.to_str().is_some_and(|a| COMMANDS.contains(&a)))
    else {
        return Ok(args);
    };
    let mut file = None;
    for (i, a) in args.iter().enumerate().skip(cmd_at + 1) {
        let Some(s) = a.to_str() else { continue };
        if s == "--config" {
            file = args.get(i + 1).map(PathBuf::from);
        } else if let Some(p) = s.strip_prefix("--config=") {
            file = Some(PathBuf::from(p));
        }
    }
    let Some(file) = file else { return Ok(args) };
    let (command, flags) = read(&file)?;
    let cmd = args[cmd_at].to_string_lossy().into_owned();
    if let Some(c) = command {
        if c != cmd {
            bail!(
                "{} is a configuration for `httpcrypt {c}`, not `httpcrypt {cmd}`",
                file.display()
            );
        }
    }
    let mut out: Vec<OsString> = args[..=cmd_at].to_vec();
    out.extend(flags);
    out.extend(args[cmd_at + 1..].iter().cloned());
    Ok(out)
}

/// The effective settings of a parsed command as a configuration file:
/// every flag of `cmd` with its value, defaults included (flags not set
/// are `false`; options without a value are left out).
pub fn format(cmd: &clap::Command, matches: &clap::ArgMatches, command: &str) -> String {
    let mut out = format!("command = {}\n", toml::Value::String(command.to_string()));
    let mut args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .collect();
    args.sort_by_key(|a| a.get_long());
    for arg in args {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "config" | "help" | "version") {
            continue;
        }
        if arg.is_hide_env_values_set() {
            // A secret (from the environment, say): never printed.
            out.push_str(&format!("# {long}: a secret, not shown\n"));
            continue;
        }
        let flag = matches!(
            arg.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
        );
        if flag {
            let on = matches.get_flag(id);
            out.push_str(&format!("{long} = {on}\n"));
            continue;
        }
        let Some(raw) = matches.get_raw(id) else {
            continue;
        };
        let values: Vec<toml::Value> = raw
            .map(|v| toml::Value::String(v.to_string_lossy().into_owned()))
            .collect();
        let multiple = matches!(arg.get_action(), clap::ArgAction::Append);
        let value = if multiple {
            toml::Value::Array(values)
        } else {
            match values.into_iter().last() {
                Some(v) => v,
                None => continue,
            }
        };
        out.push_str(&format!("{long} = {value}\n"));
    }
    out
}
