//! Answer CSVs as the TPC-H answer set and DuckDB write them: a header of the query's column
//! names, money with two decimals, dates as `YYYY-MM-DD`, text quoted only when it must be.

/// A CSV being written.
pub struct Csv {
    text: String,
}

impl Csv {
    /// An answer with these columns.
    pub fn new(headers: &[&str]) -> Self {
        let mut csv = Self {
            text: String::new(),
        };
        csv.line(headers.iter().copied());
        csv
    }

    /// Appends a row (one field per column).
    pub fn row(&mut self, fields: &[String]) {
        self.line(fields.iter().map(String::as_str));
    }

    fn line<'a>(&mut self, fields: impl Iterator<Item = &'a str>) {
        for (i, field) in fields.enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            if field.contains([',', '"', '\n', '\r']) {
                self.text.push('"');
                self.text.push_str(&field.replace('"', "\"\""));
                self.text.push('"');
            } else {
                self.text.push_str(field);
            }
        }
        self.text.push('\n');
    }

    /// The whole CSV.
    pub fn finish(self) -> String {
        self.text
    }
}

/// An amount with two decimals (`-0.00` written as `0.00`).
pub fn money(amount: f64) -> String {
    let text = format!("{amount:.2}");
    if text == "-0.00" {
        "0.00".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_fields_that_need_it() {
        let mut csv = Csv::new(&["a", "b"]);
        csv.row(&["x,y".to_owned(), "say \"hi\"".to_owned()]);
        csv.row(&["plain".to_owned(), String::new()]);
        assert_eq!(csv.finish(), "a,b\n\"x,y\",\"say \"\"hi\"\"\"\nplain,\n");
        assert_eq!(money(1.005e3), "1005.00");
        assert_eq!(money(-0.001), "0.00");
    }
}
