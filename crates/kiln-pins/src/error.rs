//! [`PositionedError`]: a problem in a file kiln reads (the pin file, the
//! runner matrix) placed at `file:line:column`, with its help line.

use std::{
    fmt,
    ops::Range,
    path::{Path, PathBuf},
};

/// A problem in a file kiln reads (the pin file, the runner matrix), located
/// to `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionedError {
    pub file: PathBuf,
    /// 0 when the problem has no place in the file (it cannot be read, or
    /// concerns the whole of it).
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

/// A problem in the pin file.
pub type PinError = PositionedError;

impl PositionedError {
    /// At a 1-based `line` and `column` of `file`.
    pub fn new(file: &Path, line: usize, column: usize, message: impl Into<String>) -> PositionedError {
        PositionedError { file: file.to_path_buf(), line, column, message: message.into(), help: None }
    }

    /// About the whole of `file`, or a file that cannot be read: no place in it.
    pub fn whole(file: &Path, message: impl Into<String>) -> PositionedError {
        PositionedError::new(file, 0, 0, message)
    }

    /// At the start of `span`, a byte range of `text` (the whole file without one).
    pub fn at(file: &Path, text: &str, span: Option<Range<usize>>, message: String) -> PositionedError {
        let (line, column) = span.map_or((0, 0), |span| line_col(text, span.start));
        PositionedError::new(file, line, column, message)
    }

    pub fn help(mut self, help: impl Into<String>) -> PositionedError {
        self.help = Some(help.into());
        self
    }
}

/// 1-based line and column (in characters) of a byte offset in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl fmt::Display for PositionedError {
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

impl std::error::Error for PositionedError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_count_lines_and_characters_from_one() {
        let text = "a = 1\nbé = [\n  2]\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, text.find('[').unwrap()), (2, 6), "columns count characters, not bytes");
        assert_eq!(line_col(text, text.find('2').unwrap()), (3, 3));
        assert_eq!(line_col(text, text.len() + 10), (4, 1), "past the end: the end");
    }

    #[test]
    fn renders_file_line_column_and_help() {
        let file = Path::new("pins.toml");
        let e = PositionedError::at(file, "x\ny = 2\n", Some(4..5), "bad".into()).help("fix it");
        assert_eq!(e.to_string(), "pins.toml:2:3: bad\n  help: fix it");
        assert_eq!(PositionedError::whole(file, "cannot read").to_string(), "pins.toml: cannot read");
        assert_eq!(PositionedError::at(file, "x", None, "empty".into()).to_string(), "pins.toml: empty");
    }
}
