//! Where `httpcrypt fetch` puts a verified answer ([`Sink`]: stdout, or a
//! file that appears only once the whole body verified), and the check that
//! a verified answer is the application's and not a sealed protocol problem.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Where a body goes: stdout, or `-o FILE` by way of a temporary file
/// beside FILE (a unique name, created exclusively) that becomes FILE only
/// in [`Sink::finish`], once the whole response verified. A sink dropped
/// unfinished (an integrity failure, a write error) removes its temporary
/// file, so FILE never holds a partial or unverified body.
pub enum Sink {
    /// Standard output.
    Stdout(std::io::Stdout),
    /// The temporary file and FILE.
    File {
        tmp: std::io::BufWriter<tempfile::NamedTempFile>,
        dest: PathBuf,
    },
    /// A FILE that is not a regular file (`/dev/null`, a pipe): written
    /// as it is, since it cannot be replaced by a rename.
    Special(std::fs::File),
}

impl Sink {
    /// A sink for `output` (stdout when `None`).
    pub fn open(output: Option<&Path>) -> Result<Sink> {
        let Some(dest) = output else {
            return Ok(Sink::Stdout(std::io::stdout()));
        };
        if std::fs::metadata(dest).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(dest)
                .with_context(|| format!("opening {}", dest.display()))?;
            return Ok(Sink::Special(f));
        }
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = dest
            .file_name()
            .with_context(|| format!("{} names no file", dest.display()))?;
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".part");
        // Like a file the shell creates: 0666 less the umask (a temporary
        // file is 0600 otherwise).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder
            .tempfile_in(dir)
            .with_context(|| format!("creating a temporary file for {}", dest.display()))?;
        Ok(Sink::File {
            tmp: std::io::BufWriter::new(tmp),
            dest: dest.to_path_buf(),
        })
    }

    /// Flushes; a file sink's temporary file becomes FILE.
    pub fn finish(self) -> Result<()> {
        match self {
            Sink::Stdout(mut s) => Ok(s.flush()?),
            Sink::Special(mut f) => Ok(f.flush()?),
            Sink::File { tmp, dest } => {
                let tmp = tmp.into_inner().map_err(|e| e.into_error())?;
                tmp.as_file().sync_all()?;
                tmp.persist(&dest)
                    .map_err(|e| e.error)
                    .with_context(|| format!("renaming to {}", dest.display()))?;
                Ok(())
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::File { tmp, .. } => tmp.write(buf),
            Sink::Special(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Stdout(s) => s.write_all(buf),
            Sink::File { tmp, .. } => tmp.write_all(buf),
            Sink::Special(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::File { tmp, .. } => tmp.flush(),
            Sink::Special(f) => f.flush(),
        }
    }
}

/// An error if the (authenticated) inner response is a problem document
/// of the protocol itself (`urn:httpcrypt:…`: integrity, replay, stale, …)
/// rather than an answer of the application.
pub fn refuse_inner_problem(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: Option<&[u8]>,
) -> Result<()> {
    let is_problem = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == httpcrypt::proto::outer::PROBLEM_TYPE.as_bytes());
    if !is_problem {
        return Ok(());
    }
    let Some(p) = body.and_then(|b| httpcrypt::proto::outer::parse_problem(b).ok()) else {
        return Ok(());
    };
    if p.type_uri.starts_with("urn:httpcrypt:") {
        bail!(
            "the server reported a protocol failure (sealed, so it is the server's word): {} {}",
            status.as_u16(),
            p.type_uri
        );
    }
    Ok(())
}
