//! Adding accounts and granting credits to many people at once, from a CSV file an admin
//! uploads: the rule that reads the file ([`parse`]) and the rule that decides, for each line,
//! whether it adds an account or grants to one already there ([`plan`]).
//!
//! A file is all or nothing: one bad line and nothing is added or granted, and every bad line
//! is named by its number and the reason, so that one correction of the file is enough. The
//! admin sees the plan first (a dry run) and applies it second; the server decides again on
//! applying, with the accounts as they are then, in one transaction.
//!
//! The columns are `name,role,credits,note`, in that order, or in any order under a header line
//! naming them (a first line with a `name` cell is one; `name` is the one column required). `role` is `user` (the default) or `admin`;
//! `credits` is an amount as the grant field takes it ("10", "2.5"; negative takes back from an
//! account that exists, down to zero); `note` goes to the ledger and the audit log. Fields may
//! be quoted (`"Lovelace, Ada"`, `""` for a quote); blank lines and lines starting with `#` are
//! skipped. A field cannot span lines, so a line's number is the file's.

use super::{accounts, credits};
use serde::{Deserialize, Serialize};

/// The most lines a file may have (blank ones included).
pub const MAX_LINES: usize = 1000;

/// The largest file, in bytes.
pub const MAX_BYTES: usize = 256 * 1024;

/// The columns a file may have, in the order a file without a header gives them.
pub const COLUMNS: [&str; 4] = ["name", "role", "credits", "note"];

/// A line of the file, read and checked on its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Its line number in the file, from 1.
    pub line: usize,
    pub name: String,
    /// `Some(true)` for `admin`, `Some(false)` for `user`, `None` when the cell is empty.
    pub admin: Option<bool>,
    /// Milli-credits; 0 when the cell is empty.
    pub credits: i64,
    pub note: String,
}

/// What is wrong with a line (or with the file as a whole: line 0), in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub line: usize,
    pub reason: String,
}

impl Problem {
    fn at(line: usize, reason: impl Into<String>) -> Problem {
        Problem {
            line,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "the file: {}", self.reason),
            n => write!(f, "line {n}: {}", self.reason),
        }
    }
}

/// Every problem as one sentence, for an error message.
pub fn describe(problems: &[Problem]) -> String {
    let listed: Vec<String> = problems.iter().map(Problem::to_string).collect();
    format!("nothing was added or granted; {}", listed.join("; "))
}

/// What a line comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A new account; `admin` for the role.
    Add { admin: bool },
    /// Credits for an account that exists (negative takes back).
    Grant,
}

/// A line's part of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub line: usize,
    pub name: String,
    pub action: Action,
    /// Milli-credits granted (an added account's on top of the starting grant); 0 for none.
    pub credits: i64,
    pub note: String,
}

impl Planned {
    /// The line's plan in words: "add ada as an admin with 10 credits", "grant bob 5 credits".
    pub fn words(&self) -> String {
        let amount = credits::with_unit(self.credits.abs());
        match self.action {
            Action::Add { admin } => {
                let role = if admin { "an admin" } else { "a user" };
                match self.credits {
                    0 => format!("add {} as {role}", self.name),
                    _ => format!("add {} as {role} and grant {amount}", self.name),
                }
            }
            Action::Grant if self.credits < 0 => format!("take {amount} back from {}", self.name),
            Action::Grant => format!("grant {} {amount}", self.name),
        }
    }
}

/// An account the file names that exists already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Existing {
    pub admin: bool,
    pub deleted: bool,
    /// Milli-credits.
    pub balance: i64,
}

/// Reads the file into rows; every bad line is a problem, and one problem means no rows.
pub fn parse(text: &str) -> Result<Vec<Row>, Vec<Problem>> {
    if text.len() > MAX_BYTES {
        return Err(vec![Problem::at(
            0,
            format!("it is larger than {} KiB", MAX_BYTES / 1024),
        )]);
    }
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() > MAX_LINES {
        return Err(vec![Problem::at(
            0,
            format!("it has more than {MAX_LINES} lines; split it"),
        )]);
    }
    let mut problems = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    // Where each column is: the header's order, or the default one.
    let mut order: Option<Vec<usize>> = None;
    for (i, raw) in lines.iter().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let cells = match split(raw) {
            Ok(cells) => cells,
            Err(reason) => {
                problems.push(Problem::at(line, reason));
                continue;
            }
        };
        if order.is_none() {
            // A first line that names the column `name` is a header.
            if cells.iter().any(|c| c.trim().eq_ignore_ascii_case("name")) {
                match header(&cells) {
                    Ok(columns) => order = Some(columns),
                    Err(reason) => {
                        problems.push(Problem::at(line, reason));
                        return Err(problems);
                    }
                }
                continue;
            }
            order = Some((0..COLUMNS.len()).collect());
        }
        let columns = order.as_deref().unwrap_or_default();
        match row(line, &cells, columns) {
            Ok(row) => {
                if let Some(first) = rows.iter().find(|r| r.name == row.name) {
                    problems.push(Problem::at(
                        line,
                        format!("{} is on line {} already", row.name, first.line),
                    ));
                } else {
                    rows.push(row);
                }
            }
            Err(reason) => problems.push(Problem::at(line, reason)),
        }
    }
    if problems.is_empty() && rows.is_empty() {
        problems.push(Problem::at(
            0,
            "it names nobody: give one account a line, as name,role,credits,note",
        ));
    }
    if problems.is_empty() {
        Ok(rows)
    } else {
        Err(problems)
    }
}

/// A line's cells: split at commas outside double quotes, a doubled quote inside quotes being
/// one quote.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    // Whether this cell was quoted: only spaces may follow its closing quote.
    let mut closed = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => {
                quoted = false;
                closed = true;
            }
            (true, c) => cell.push(c),
            (false, ',') => {
                cells.push(std::mem::take(&mut cell));
                closed = false;
            }
            (false, '"') if !closed && cell.trim().is_empty() => {
                cell.clear();
                quoted = true;
            }
            (false, '"') => {
                return Err(
                    "a quote in the middle of a field: quote the whole field and double the quote (\"say \"\"hi\"\"\")"
                        .into(),
                );
            }
            (false, c) if closed && !c.is_whitespace() => {
                return Err("text after a quoted field's closing quote".into());
            }
            (false, c) => cell.push(c),
        }
    }
    if quoted {
        return Err("a quote is not closed (a field cannot span lines)".into());
    }
    cells.push(cell);
    Ok(cells)
}

/// The column of each of [`COLUMNS`] in a header line: `usize::MAX` where it is missing.
fn header(cells: &[String]) -> Result<Vec<usize>, String> {
    let mut order = vec![usize::MAX; COLUMNS.len()];
    for (at, cell) in cells.iter().enumerate() {
        let name = cell.trim().to_ascii_lowercase();
        let Some(column) = COLUMNS.iter().position(|c| *c == name) else {
            return Err(format!(
                "the header names the column `{}`; the columns are name, role, credits and note",
                cell.trim()
            ));
        };
        if order[column] != usize::MAX {
            return Err(format!("the header names `{name}` twice"));
        }
        order[column] = at;
    }
    Ok(order)
}

/// One line's row, its cells found where `order` says.
fn row(line: usize, cells: &[String], order: &[usize]) -> Result<Row, String> {
    let known = order.iter().filter(|at| **at != usize::MAX).count();
    if cells.len() > known {
        return Err(format!(
            "{} fields where there are at most {known} ({}); quote a field that has a comma",
            cells.len(),
            COLUMNS
                .iter()
                .zip(order)
                .filter(|(_, at)| **at != usize::MAX)
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    let cell = |column: usize| {
        order
            .get(column)
            .and_then(|at| cells.get(*at))
            .map_or("", |c| c.trim())
    };
    let name = accounts::checked_user_name(cell(0))
        .map_err(|e| format!("the name: {e}"))?
        .to_string();
    let admin = match cell(1).to_ascii_lowercase().as_str() {
        "" => None,
        "user" => Some(false),
        "admin" => Some(true),
        other => {
            return Err(format!(
                "the role is `{other}`; it is user, admin, or empty for user"
            ));
        }
    };
    let credits = match cell(2) {
        "" => 0,
        amount => credits::checked_grant(amount).map_err(|e| format!("the credits: {e}"))?,
    };
    let note = credits::checked_note(cell(3))
        .map_err(|e| format!("the note: {e}"))?
        .to_string();
    Ok(Row {
        line,
        name,
        admin,
        credits,
        note,
    })
}

/// What each row comes to, given the accounts that exist (`existing`, by name): a new name is
/// added, a known one granted to. Every row that cannot be done is a problem, and one problem
/// means no plan.
pub fn plan(
    rows: Vec<Row>,
    existing: impl Fn(&str) -> Option<Existing>,
) -> Result<Vec<Planned>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut planned = Vec::new();
    for row in rows {
        let Row {
            line,
            name,
            admin,
            credits: amount,
            note,
        } = row;
        let action = match existing(&name) {
            None if amount < 0 => Err("a new account cannot start by taking credits back".into()),
            None => Ok(Action::Add {
                admin: admin.unwrap_or(false),
            }),
            Some(account) if account.deleted => Err(format!(
                "{name} is a deleted account, whose name stays taken"
            )),
            Some(account) if admin.is_some_and(|admin| admin != account.admin) => {
                let is = if account.admin { "an admin" } else { "a user" };
                Err(format!(
                    "{name} exists and is {is}: change a role in the table, not by file (leave the role empty)"
                ))
            }
            Some(_) if amount == 0 => Err(format!(
                "{name} exists and the line grants nothing: give credits, or leave the line out"
            )),
            Some(account) if account.balance + amount < 0 => Err(format!(
                "that takes back more than {name}'s balance ({})",
                credits::with_unit(account.balance)
            )),
            Some(_) => Ok(Action::Grant),
        };
        match action {
            Ok(action) => planned.push(Planned {
                line,
                name,
                action,
                credits: amount,
                note,
            }),
            Err(reason) => problems.push(Problem::at(line, reason)),
        }
    }
    if problems.is_empty() {
        Ok(planned)
    } else {
        Err(problems)
    }
}

/// [`parse`] then [`plan`]: the file's plan, or every problem of it.
pub fn check(
    text: &str,
    existing: impl Fn(&str) -> Option<Existing>,
) -> Result<Vec<Planned>, Vec<Problem>> {
    plan(parse(text)?, existing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody(_: &str) -> Option<Existing> {
        None
    }

    fn lines_of(problems: &[Problem]) -> Vec<usize> {
        problems.iter().map(|p| p.line).collect()
    }

    #[test]
    fn a_good_file_plans_every_line_in_order() {
        let plan = check("ada,admin,10,course lead\nbob,,2.5\ncy\n", nobody).unwrap();
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[0].action, Action::Add { admin: true });
        assert_eq!(
            (plan[0].credits, plan[0].note.as_str()),
            (10_000, "course lead")
        );
        assert_eq!(plan[1].action, Action::Add { admin: false });
        assert_eq!(plan[1].credits, 2_500);
        assert_eq!((plan[2].name.as_str(), plan[2].credits), ("cy", 0));
        assert_eq!(plan[0].words(), "add ada as an admin and grant 10 credits");
        assert_eq!(plan[2].words(), "add cy as a user");
    }

    #[test]
    fn a_header_names_the_columns_in_any_order() {
        let plan = check("Credits, Name\n5,ada\n\n# a comment\n1,bob\n", nobody).unwrap();
        assert_eq!(
            plan.iter()
                .map(|p| (p.line, p.name.as_str(), p.credits))
                .collect::<Vec<_>>(),
            [(2, "ada", 5_000), (5, "bob", 1_000)],
            "blank and comment lines keep the numbering"
        );
        let unknown = check("name,email\nada,ada@example.com\n", nobody).unwrap_err();
        assert_eq!(lines_of(&unknown), [1]);
        assert!(unknown[0].reason.contains("`email`"), "{:?}", unknown);
    }

    #[test]
    fn every_bad_line_is_named_with_its_reason() {
        let file = "ada,user,10\nbob,boss\ncy,,lots\nd/e\nada,,1\nfay,,1,2,3\n\"gus,admin\n";
        let problems = check(file, nobody).unwrap_err();
        assert_eq!(lines_of(&problems), [2, 3, 4, 5, 6, 7]);
        let said = describe(&problems);
        assert!(said.starts_with("nothing was added or granted"), "{said}");
        assert!(said.contains("line 2: the role is `boss`"), "{said}");
        assert!(said.contains("line 3: the credits: 'lots'"), "{said}");
        assert!(said.contains("line 4: the name"), "{said}");
        assert!(said.contains("line 5: ada is on line 1 already"), "{said}");
        assert!(said.contains("line 6: 5 fields"), "{said}");
        assert!(said.contains("line 7: a quote is not closed"), "{said}");
    }

    #[test]
    fn quoted_fields_keep_commas_and_quotes() {
        let plan = check("\"Lovelace, Ada\",admin,1,\"says \"\"hi\"\"\"\r\n", nobody).unwrap();
        assert_eq!(plan[0].name, "Lovelace, Ada");
        assert_eq!(plan[0].note, "says \"hi\"");
        assert!(check("a\"b,user\n", nobody).is_err());
        assert!(check("\"ab\"c,user\n", nobody).is_err());
    }

    #[test]
    fn an_empty_or_oversized_file_is_refused_as_a_whole() {
        assert_eq!(lines_of(&check("", nobody).unwrap_err()), [0]);
        assert_eq!(lines_of(&check("name,role\n\n", nobody).unwrap_err()), [0]);
        let long = "a\n".repeat(MAX_LINES + 1);
        assert!(
            check(&long, nobody).unwrap_err()[0]
                .reason
                .contains("lines")
        );
        let big = "x".repeat(MAX_BYTES + 1);
        assert!(check(&big, nobody).unwrap_err()[0].reason.contains("KiB"));
        assert_eq!(
            parse("\u{FEFF}ada\n").unwrap()[0].name,
            "ada",
            "a spreadsheet's byte-order mark"
        );
    }

    #[test]
    fn a_known_name_is_granted_to_and_never_changed() {
        let existing = |name: &str| match name {
            "ada" => Some(Existing {
                admin: false,
                deleted: false,
                balance: 3_000,
            }),
            "old" => Some(Existing {
                admin: false,
                deleted: true,
                balance: 0,
            }),
            _ => None,
        };
        let plan = check("ada,,5\nada2,,-1\n", existing);
        assert_eq!(
            lines_of(&plan.unwrap_err()),
            [2],
            "a new account cannot start below zero"
        );
        let plan = check("ada,user,-3,end of term\nnew,admin\n", existing).unwrap();
        assert_eq!(plan[0].action, Action::Grant);
        assert_eq!(plan[0].words(), "take 3 credits back from ada");
        assert_eq!(plan[1].action, Action::Add { admin: true });
        let problems = check("ada,admin,1\nold,,1\nada2\nada,,-4\n", existing).unwrap_err();
        // Line 4 repeats ada: the file is refused on reading, before any account is looked at.
        assert_eq!(lines_of(&problems), [4]);
        let problems = check("ada,admin,1\nold,,1\n", existing).unwrap_err();
        assert_eq!(lines_of(&problems), [1, 2]);
        assert!(problems[0].reason.contains("change a role in the table"));
        assert!(problems[1].reason.contains("deleted"));
        let problems = check("ada\n", existing).unwrap_err();
        assert!(problems[0].reason.contains("grants nothing"));
        let problems = check("ada,,-4\n", existing).unwrap_err();
        assert!(problems[0].reason.contains("3 credits"), "{problems:?}");
    }
}
