use std::{fmt, path::PathBuf};

/// A problem in the matrix file, located to `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixError {
    pub file: PathBuf,
    /// 0 when the problem has no place in the file (it cannot be read).
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl MatrixError {
    pub(crate) fn help(mut self, help: impl Into<String>) -> MatrixError {
        self.help = Some(help.into());
        self
    }
}

impl fmt::Display for MatrixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.column, self.message)?;
        } else {
            write!(f, "{}: {}", self.file.display(), self.message)?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

impl std::error::Error for MatrixError {}
