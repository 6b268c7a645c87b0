use std::{
    fmt,
    ops::Range,
    path::{Path, PathBuf},
};

/// A problem in the pin file, located to `file:line:column`.
#[derive(Debug)]
pub struct PinError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl PinError {
    pub(crate) fn at(file: &Path, text: &str, span: Option<Range<usize>>, message: String) -> PinError {
        let (line, column) = match span {
            Some(span) => line_col(text, span.start),
            None => (0, 0),
        };
        PinError { file: file.to_path_buf(), line, column, message, help: None }
    }

    pub(crate) fn help(mut self, help: impl Into<String>) -> PinError {
        self.help = Some(help.into());
        self
    }
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl fmt::Display for PinError {
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

impl std::error::Error for PinError {}
