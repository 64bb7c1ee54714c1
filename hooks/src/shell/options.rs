//! Option grammars: how a command's arguments split into options, their values and operands,
//! the way the command itself splits them (getopt clusters, attached and optional values,
//! abbreviated long options, `--`). The walker needs this to find the command a wrapper runs,
//! the file an option writes, and to write options out in one spelling for the rules.

use crate::pattern::Arg;

/// What an option takes after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    /// Nothing: a switch.
    Nothing,
    /// A value: attached (`-ofile`, `--out=file`) or the next argument.
    Value,
    /// A value only when attached (`-i.bak`, `--replace=R`); the next argument is not it.
    Optional,
}

/// A command's option grammar.
pub(super) struct Grammar {
    /// getopt's short option string: a letter, `:` after it for a value, `::` for an optional
    /// value that must be attached.
    pub short: &'static str,
    /// Long options without the leading `--`, separated by spaces: `name` a switch, `name=`
    /// with a value, `name?` with an optional value (attached with `=` only).
    pub long: &'static str,
    /// Unambiguous prefixes of long options are accepted (GNU getopt_long, git's
    /// parse-options); a prefix of several is refused by the tool.
    pub abbreviations: bool,
    /// Options end at the first operand (wrappers: what follows is a command line).
    pub stop_at_operand: bool,
}

/// An option's name as the grammar knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Name {
    Short(char),
    /// A long option, completed when abbreviated.
    Long(&'static str),
    /// A long option the grammar does not know, as written (without `--` and value).
    UnknownLong(String),
}

/// One argument (or option with its value) after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    /// An option; `optional` when its value can only be attached (written so again).
    Opt {
        name: Name,
        value: Option<Arg>,
        optional: bool,
    },
    Operand(Arg),
    /// `--`: everything after it is an operand.
    EndOfOptions,
}

/// A parsed argument list.
#[derive(Debug, Clone, Default)]
pub(super) struct Parsed {
    pub items: Vec<Item>,
    /// Index into the arguments of the first one not parsed (`stop_at_operand`: the start of
    /// the command line; otherwise the length).
    pub rest: usize,
    /// Long options written as a prefix of several (the tool refuses them).
    pub ambiguous: Vec<String>,
    /// A computed argument stood where an option could (it may be any option).
    pub computed_option: bool,
}

impl Grammar {
    fn short_takes(&self, c: char) -> Option<Takes> {
        let bytes = self.short.as_bytes();
        let at = self.short.find(c)?;
        if c == ':' {
            return None;
        }
        Some(match (bytes.get(at + 1), bytes.get(at + 2)) {
            (Some(b':'), Some(b':')) => Takes::Optional,
            (Some(b':'), _) => Takes::Value,
            _ => Takes::Nothing,
        })
    }

    fn long_options(&self) -> impl Iterator<Item = (&'static str, Takes)> {
        self.long.split_whitespace().map(|entry| {
            if let Some(name) = entry.strip_suffix('=') {
                (name, Takes::Value)
            } else if let Some(name) = entry.strip_suffix('?') {
                (name, Takes::Optional)
            } else {
                (entry, Takes::Nothing)
            }
        })
    }

    /// The long option `written` names: exact, or the only one it abbreviates. `Err` holds
    /// whether it was ambiguous.
    fn long_option(&self, written: &str) -> Result<(&'static str, Takes), bool> {
        if let Some(found) = self.long_options().find(|(n, _)| *n == written) {
            return Ok(found);
        }
        if !self.abbreviations || written.is_empty() {
            return Err(false);
        }
        let mut found = self.long_options().filter(|(n, _)| n.starts_with(written));
        match (found.next(), found.next()) {
            (Some(only), None) => Ok(only),
            (Some(_), Some(_)) => Err(true),
            _ => Err(false),
        }
    }

    /// Splits `args` the way the command would.
    pub fn parse(&self, args: &[Arg]) -> Parsed {
        let mut parsed = Parsed {
            rest: args.len(),
            ..Parsed::default()
        };
        let mut i = 0;
        while i < args.len() {
            let text = match &args[i] {
                Arg::Static(s) => s.as_str(),
                computed => {
                    let (prefix, suffix) = (computed.static_prefix(), computed.static_suffix());
                    if !prefix.is_empty() && !prefix.starts_with('-') {
                        // An operand, whatever the computed part holds (`"src/$f"`).
                        if self.stop_at_operand {
                            parsed.rest = i;
                            return parsed;
                        }
                        parsed.items.push(Item::Operand(computed.clone()));
                        i += 1;
                        continue;
                    }
                    if let Some((written, value)) =
                        prefix.strip_prefix("--").and_then(|l| l.split_once('='))
                    {
                        // `--name="$x"`: the option is known, its value computed.
                        let name = match self.long_option(written) {
                            Ok((name, _)) => Name::Long(name),
                            Err(_) => Name::UnknownLong(written.to_string()),
                        };
                        parsed.items.push(Item::Opt {
                            name,
                            value: Some(computed_arg(value, suffix)),
                            optional: false,
                        });
                        i += 1;
                        continue;
                    }
                    if prefix.len() > 1 && !prefix.starts_with("--") {
                        // `-o"$x"`: the letters before the computed part are options.
                        i += 1;
                        let cluster: Vec<char> = prefix[1..].chars().collect();
                        let mut valued = false;
                        for (j, &c) in cluster.iter().enumerate() {
                            let takes = self.short_takes(c).unwrap_or(Takes::Nothing);
                            if takes == Takes::Nothing {
                                parsed.items.push(Item::Opt {
                                    name: Name::Short(c),
                                    value: None,
                                    optional: false,
                                });
                                continue;
                            }
                            let attached: String = cluster[j + 1..].iter().collect();
                            parsed.items.push(Item::Opt {
                                name: Name::Short(c),
                                value: Some(computed_arg(&attached, suffix)),
                                optional: takes == Takes::Optional,
                            });
                            valued = true;
                            break;
                        }
                        if !valued {
                            // More letters may follow at run time.
                            parsed.computed_option = true;
                        }
                        continue;
                    }
                    if self.stop_at_operand {
                        parsed.rest = i;
                        return parsed;
                    }
                    parsed.computed_option = true;
                    parsed.items.push(Item::Operand(computed.clone()));
                    i += 1;
                    continue;
                }
            };
            if text == "--" {
                parsed.items.push(Item::EndOfOptions);
                i += 1;
                if self.stop_at_operand {
                    parsed.rest = i;
                    return parsed;
                }
                parsed
                    .items
                    .extend(args[i..].iter().cloned().map(Item::Operand));
                return parsed;
            }
            if let Some(long) = text.strip_prefix("--") {
                let (written, attached) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(Arg::Static(v.to_string()))),
                    None => (long, None),
                };
                let (name, takes) = match self.long_option(written) {
                    Ok((name, takes)) => (Name::Long(name), takes),
                    Err(ambiguous) => {
                        if ambiguous {
                            parsed.ambiguous.push(written.to_string());
                        }
                        (Name::UnknownLong(written.to_string()), Takes::Optional)
                    }
                };
                i += 1;
                let value = match (attached, takes) {
                    (Some(v), _) => Some(v),
                    (None, Takes::Value) if i < args.len() => {
                        i += 1;
                        Some(args[i - 1].clone())
                    }
                    _ => None,
                };
                parsed.items.push(Item::Opt {
                    name,
                    value,
                    optional: false,
                });
                continue;
            }
            if text.len() > 1 && text.starts_with('-') {
                i += 1;
                let cluster: Vec<char> = text[1..].chars().collect();
                let mut j = 0;
                while j < cluster.len() {
                    let c = cluster[j];
                    j += 1;
                    let attached: String = cluster[j..].iter().collect();
                    match self.short_takes(c).unwrap_or(Takes::Nothing) {
                        Takes::Nothing => parsed.items.push(Item::Opt {
                            name: Name::Short(c),
                            value: None,
                            optional: false,
                        }),
                        Takes::Optional => {
                            parsed.items.push(Item::Opt {
                                name: Name::Short(c),
                                value: (!attached.is_empty()).then_some(Arg::Static(attached)),
                                optional: true,
                            });
                            break;
                        }
                        Takes::Value => {
                            let value = if !attached.is_empty() {
                                Some(Arg::Static(attached))
                            } else if i < args.len() {
                                i += 1;
                                Some(args[i - 1].clone())
                            } else {
                                None
                            };
                            parsed.items.push(Item::Opt {
                                name: Name::Short(c),
                                value,
                                optional: false,
                            });
                            break;
                        }
                    }
                }
                continue;
            }
            if self.stop_at_operand {
                parsed.rest = i;
                return parsed;
            }
            parsed.items.push(Item::Operand(args[i].clone()));
            i += 1;
        }
        parsed
    }
}

/// A value that is computed, with the static text around it.
fn computed_arg(prefix: &str, suffix: &str) -> Arg {
    if prefix.is_empty() && suffix.is_empty() {
        Arg::Dynamic
    } else {
        Arg::Partial {
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
        }
    }
}

impl Name {
    /// Whether this is the option written `name` (one letter: the short option; otherwise
    /// the long one, without `--`).
    fn is(&self, name: &str) -> bool {
        match self {
            Name::Short(c) => name.len() == c.len_utf8() && name.starts_with(*c),
            Name::Long(n) => *n == name,
            Name::UnknownLong(_) => false,
        }
    }
}

impl Parsed {
    /// Whether any of the options `names` is given.
    pub fn has(&self, names: &[&str]) -> bool {
        self.options()
            .any(|(name, _)| names.iter().any(|n| name.is(n)))
    }

    /// Every value given to one of `names` (`None` for an option given without one).
    pub fn values<'a>(&'a self, names: &'a [&'a str]) -> impl Iterator<Item = Option<&'a Arg>> {
        self.options()
            .filter(|(name, _)| names.iter().any(|n| name.is(n)))
            .map(|(_, value)| value)
    }

    fn options(&self) -> impl Iterator<Item = (&Name, Option<&Arg>)> {
        self.items.iter().filter_map(|item| match item {
            Item::Opt { name, value, .. } => Some((name, value.as_ref())),
            _ => None,
        })
    }

    /// The operands, in order.
    pub fn operands(&self) -> Vec<&Arg> {
        self.items
            .iter()
            .filter_map(|item| match item {
                Item::Operand(a) => Some(a),
                _ => None,
            })
            .collect()
    }

    /// Marks the operands from the `index`-th on as paths, as `--` would (`git checkout REV
    /// FILE` is `git checkout REV -- FILE`); nothing when `--` is already there.
    pub fn paths_from(&mut self, index: usize) {
        if self.items.contains(&Item::EndOfOptions) {
            return;
        }
        let mut seen = 0;
        for (at, item) in self.items.iter().enumerate() {
            if matches!(item, Item::Operand(_)) {
                if seen == index {
                    self.items.insert(at, Item::EndOfOptions);
                    return;
                }
                seen += 1;
            }
        }
    }

    /// Adds a switch the command implies (`git restore` without `--staged` restores the
    /// working tree: `--worktree`).
    pub fn imply(&mut self, name: Name) {
        self.items.insert(
            0,
            Item::Opt {
                name,
                value: None,
                optional: false,
            },
        );
    }

    /// The arguments written out in one spelling: clusters split (`-rf` → `-r -f`), long
    /// options completed with their value after `=` (`--force-w` → `--force-with-lease`,
    /// `--output F` → `--output=F`), a short option's value as the next word (an optional one
    /// stays attached: `-i.bak`), operands and `--` as they were.
    pub fn canonical(&self) -> Vec<Arg> {
        let mut out = Vec::new();
        for item in &self.items {
            match item {
                Item::Opt {
                    name,
                    value,
                    optional,
                } => {
                    let (dashes, name) = match name {
                        Name::Short(c) => ("-", c.to_string()),
                        Name::Long(n) => ("--", (*n).to_string()),
                        Name::UnknownLong(n) => ("--", n.clone()),
                    };
                    match (value, dashes) {
                        (None, _) => out.push(Arg::Static(format!("{dashes}{name}"))),
                        (Some(Arg::Static(v)), "--") => {
                            out.push(Arg::Static(format!("--{name}={v}")))
                        }
                        (Some(v), "--") => out.push(computed_arg(
                            &format!("--{name}={}", v.static_prefix()),
                            v.static_suffix(),
                        )),
                        (Some(Arg::Static(v)), _) if *optional => {
                            out.push(Arg::Static(format!("-{name}{v}")))
                        }
                        (Some(v), _) if *optional => out.push(computed_arg(
                            &format!("-{name}{}", v.static_prefix()),
                            v.static_suffix(),
                        )),
                        (Some(v), _) => {
                            out.push(Arg::Static(format!("-{name}")));
                            out.push(v.clone());
                        }
                    }
                }
                Item::Operand(a) => out.push(a.clone()),
                Item::EndOfOptions => out.push(Arg::Static("--".into())),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::Static(w.to_string())).collect()
    }

    fn words(parsed: &Parsed) -> Vec<String> {
        parsed
            .canonical()
            .into_iter()
            .map(|a| match a {
                Arg::Static(s) => s,
                Arg::Dynamic | Arg::Partial { .. } => "…".into(),
            })
            .collect()
    }

    const TOOL: Grammar = Grammar {
        short: "fro:i::",
        long: "force recursive output= in-place? force-with-lease? force-if-includes",
        abbreviations: true,
        stop_at_operand: false,
    };

    #[test]
    fn clusters_values_and_abbreviations_are_written_out() {
        let p = TOOL.parse(&args(&[
            "-rfoOUT",
            "x",
            "--out",
            "F",
            "--force-w",
            "-i.bak",
            "-i",
            "y",
        ]));
        assert_eq!(
            words(&p),
            [
                "-r",
                "-f",
                "-o",
                "OUT",
                "x",
                "--output=F",
                "--force-with-lease",
                "-i.bak",
                "-i",
                "y"
            ]
        );
        assert_eq!(
            p.operands(),
            [&Arg::Static("x".into()), &Arg::Static("y".into())]
        );
        assert!(p.has(&["f"]) && p.has(&["force-with-lease"]) && !p.has(&["force"]));
        let values: Vec<_> = p.values(&["o", "output"]).collect();
        assert_eq!(
            values,
            [
                Some(&Arg::Static("OUT".into())),
                Some(&Arg::Static("F".into()))
            ]
        );
    }

    #[test]
    fn ambiguous_and_unknown_long_options() {
        let p = TOOL.parse(&args(&["--for", "--nope=1", "--", "-r"]));
        assert_eq!(p.ambiguous, ["for"]);
        assert_eq!(words(&p), ["--for", "--nope=1", "--", "-r"]);
        assert!(!p.has(&["r"]), "after -- it is an operand");
    }

    #[test]
    fn wrappers_stop_at_the_command() {
        let wrapper = Grammar {
            short: "+e::i::I:",
            long: "replace? eof?",
            abbreviations: true,
            stop_at_operand: true,
        };
        let p = wrapper.parse(&args(&["-i", "-e", "rm", "-f"]));
        assert_eq!(p.rest, 2);
        let p = wrapper.parse(&args(&["--rep", "-I", "{}", "rm"]));
        assert_eq!(p.rest, 3);
        let computed = vec![Arg::Static("-i".into()), Arg::Dynamic];
        assert_eq!(wrapper.parse(&computed).rest, 1);
    }
}
