//! A table cell typed the way msprobe's pandas table holds it. The type matters: the
//! judgement rules treat a float `inf` differently from the text `inf`, and the CSV
//! writer prints an integer in a float column as `3.0`.

use pyrepr::repr_f64;
use pyrepr::str_repr;

#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A Python list of values, printed as `str(list)` (stack info, Data_name).
    List(Vec<Cell>),
}

impl Cell {
    pub fn s(text: &str) -> Cell {
        Cell::Str(text.to_string())
    }

    /// Python's `str(value)`.
    pub fn py_str(&self) -> String {
        match self {
            Cell::None => "None".into(),
            Cell::Bool(b) => if *b { "True" } else { "False" }.into(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(f) => repr_f64(*f),
            Cell::Str(s) => s.clone(),
            Cell::List(items) => {
                let parts: Vec<String> = items.iter().map(Cell::py_repr).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }

    /// Python's `repr(value)` (differs from `str` only for strings).
    pub fn py_repr(&self) -> String {
        match self {
            Cell::Str(s) => str_repr(s),
            other => other.py_str(),
        }
    }

    /// Python truthiness (`if not value`).
    pub fn truthy(&self) -> bool {
        match self {
            Cell::None => false,
            Cell::Bool(b) => *b,
            Cell::Int(i) => *i != 0,
            Cell::Float(f) => *f != 0.0,
            Cell::Str(s) => !s.is_empty(),
            Cell::List(l) => !l.is_empty(),
        }
    }

    fn as_number(&self) -> Option<f64> {
        match self {
            Cell::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            Cell::Int(i) => Some(*i as f64),
            Cell::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Python's `==` between two values (numbers compare by value, NaN never equal).
    pub fn py_eq(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Int(a), Cell::Int(b)) => a == b,
            (Cell::Str(a), Cell::Str(b)) => a == b,
            (Cell::None, Cell::None) => true,
            (Cell::List(a), Cell::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.py_eq(y))
            }
            (a, b) => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => x == y,
                _ => false,
            },
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Cell::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_str(&self, text: &str) -> bool {
        self.as_str() == Some(text)
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Str(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Str(s)
    }
}

impl From<f64> for Cell {
    fn from(f: f64) -> Cell {
        Cell::Float(f)
    }
}

/// How pandas prints one column: it infers the column's dtype from all its values.
/// All integers -> int64; integers and floats only -> float64 (an int prints as `3.0`);
/// anything else -> object, where each value prints with `str()`.
pub fn render_column(cells: &[&Cell]) -> Vec<String> {
    let all_int = !cells.is_empty() && cells.iter().all(|c| matches!(c, Cell::Int(_)));
    let numeric = cells
        .iter()
        .all(|c| matches!(c, Cell::Int(_) | Cell::Float(_)));
    cells
        .iter()
        .map(|c| match c {
            Cell::Int(i) if numeric && !all_int => repr_f64(*i as f64),
            other => other.py_str(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_inference() {
        let a = [Cell::Int(1), Cell::Float(2.5)];
        assert_eq!(
            render_column(&a.iter().collect::<Vec<_>>()),
            vec!["1.0", "2.5"]
        );
        let b = [Cell::Int(1), Cell::s("N/A")];
        assert_eq!(
            render_column(&b.iter().collect::<Vec<_>>()),
            vec!["1", "N/A"]
        );
        let c = [Cell::Int(1), Cell::Int(2)];
        assert_eq!(render_column(&c.iter().collect::<Vec<_>>()), vec!["1", "2"]);
    }

    #[test]
    fn list_str() {
        let l = Cell::List(vec![Cell::s("a.pt"), Cell::s("N/A")]);
        assert_eq!(l.py_str(), "['a.pt', 'N/A']");
        assert!(Cell::Int(1).py_eq(&Cell::Float(1.0)));
        assert!(!Cell::s("True").py_eq(&Cell::Bool(true)));
    }
}
