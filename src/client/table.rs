//! Aligned text tables for the client commands' human output.
//!
//! Columns are as wide as their widest cell (counted in characters, so `Straße` lines up),
//! separated by two spaces; numeric columns are right-aligned. The last column is not padded,
//! so no line ends in spaces. Nothing here knows about jobs or TaskManagers.

use std::fmt;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table with a header row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            header: columns.iter().map(|(name, _)| (*name).to_owned()).collect(),
            align: columns.iter().map(|(_, align)| *align).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn row(&mut self, cells: impl IntoIterator<Item = impl Into<String>>) -> &mut Self {
        let mut row: Vec<String> = cells
            .into_iter()
            .map(Into::into)
            .take(self.header.len())
            .collect();
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let last = self.header.len().saturating_sub(1);
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = widths[i] - cell.chars().count();
                match self.align[i] {
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                    Align::Left => {
                        line.push_str(cell);
                        if i < last {
                            line.extend(std::iter::repeat_n(' ', pad));
                        }
                    }
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_by_characters_and_numbers_right() {
        let mut table = Table::new(&[
            ("NAME", Align::Left),
            ("COUNT", Align::Right),
            ("NOTE", Align::Left),
        ]);
        table.row(["Straße", "7", "x"]);
        table.row(["a", "1234567", ""]);
        table.row(["b"]);
        assert_eq!(
            table.to_string(),
            "NAME      COUNT  NOTE\n\
             Straße        7  x\n\
             a       1234567\n\
             b\n"
        );
        assert!(!table.is_empty());
    }

    #[test]
    fn an_empty_table_is_its_header() {
        let table = Table::new(&[("A", Align::Left), ("B", Align::Left)]);
        assert!(table.is_empty());
        assert_eq!(table.to_string(), "A  B\n");
    }
}
