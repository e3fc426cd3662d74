//! How a task's question is shown to a person (docs/reference/door.md#asking): at the terminal of
//! `mur run`, by `mur send` and `mur answer` when the task asks again, and the one line that says
//! how to answer when no terminal can.
//!
//! The question is a model's or a peer's text, so it is printed only as printable text: a
//! terminal control sequence in it could rewrite what the person sees. Answers and failure texts
//! printed to a terminal are made printable the same way ([`for_stream`]).

/// Longest answer read from a terminal line, in bytes [ours]: far more than anyone types, far
/// less than the door's body bound, so a pasted file is refused rather than half sent.
pub const MAX_TERMINAL_ANSWER: usize = 64 * 1024;

/// `worker asks (through lead)`: `asked_by` is innermost first, the member that asked and then
/// each member its question came up through; `fallback` names the asker when the list is empty
/// (a session that is no formation member).
pub fn who_asks(asked_by: &[String], fallback: &str) -> String {
    let (asker, through) = match asked_by.split_first() {
        Some((a, rest)) => (printable(a), rest),
        None => (printable(fallback), &[][..]),
    };
    if through.is_empty() {
        return format!("{asker} asks");
    }
    let through: Vec<String> = through.iter().map(|m| printable(m)).collect();
    format!("{asker} asks (through {})", through.join(", "))
}

/// `text` with every control character but newline and tab written as `\u{…}`, so a question or
/// an id shown on a terminal can only be read, never obeyed.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as it goes to an output stream: [`printable`] when the stream is a terminal, where a
/// control sequence from a member, a model or a remote agent could retitle the window, clear the
/// screen or write the clipboard; the very same bytes otherwise (a pipe or a file gets exactly
/// what was said). What the commands print of such text goes through here.
pub fn for_stream(text: &str, terminal: bool) -> std::borrow::Cow<'_, str> {
    if terminal && text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        std::borrow::Cow::Owned(printable(text))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The hint printed once when a question cannot be answered at a terminal: the command, and the
/// A2A way for any client that holds the operator token (never the token itself).
pub fn how_to_answer(task_id: &str, door_url: &str, running_record: &str) -> String {
    format!(
        "answer it with `mur answer {task_id} TEXT`, or by SendMessage to {door_url} naming the task as message.taskId, with the operator token of {running_record}"
    )
}

/// What a person typed as an answer: the line without its line ending, or why it is none.
pub fn typed_answer(line: &str) -> Result<&str, &'static str> {
    let text = line.strip_suffix('\n').unwrap_or(line);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.trim().is_empty() {
        return Err("an empty line is no answer: type the answer, then Enter");
    }
    if text.len() > MAX_TERMINAL_ANSWER {
        return Err(
            "the line is longer than the 64 KiB a typed answer may hold: answer with `mur answer TASK --file PATH`",
        );
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_asks_names_the_asker_and_the_members_it_came_through() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        for (asked_by, fallback, want) in [
            (s(&[]), "local/helper", "local/helper asks"),
            (s(&["lead"]), "x", "lead asks"),
            (s(&["worker", "lead"]), "x", "worker asks (through lead)"),
            (s(&["a", "b", "c"]), "x", "a asks (through b, c)"),
            (s(&["we\u{1b}[2Jird"]), "x", "we\\u{1b}[2Jird asks"),
        ] {
            assert_eq!(who_asks(&asked_by, fallback), want, "{asked_by:?}");
        }
    }

    #[test]
    fn printable_escapes_control_characters_but_keeps_lines_and_tabs() {
        for (text, want) in [
            ("plain", "plain"),
            ("two\nlines\tand a tab", "two\nlines\tand a tab"),
            ("\u{1b}]0;title\u{7}", "\\u{1b}]0;title\\u{7}"),
            ("cr\rback", "cr\\u{d}back"),
            ("naïve ✓", "naïve ✓"),
        ] {
            assert_eq!(printable(text), want, "{text:?}");
        }
    }

    #[test]
    fn text_for_a_terminal_is_made_visible_and_for_a_pipe_left_as_it_is() {
        // (text, on a terminal, through a pipe)
        let osc = "\u{1b}]0;owned\u{7}title \u{1b}[2J \u{1b}]52;c;aGk=\u{7} \u{9b}31m";
        let table = [
            ("plain\nlines\tand tabs", "plain\nlines\tand tabs"),
            (
                osc,
                "\\u{1b}]0;owned\\u{7}title \\u{1b}[2J \\u{1b}]52;c;aGk=\\u{7} \\u{9b}31m",
            ),
        ];
        for (text, on_terminal) in table {
            assert_eq!(for_stream(text, true), on_terminal, "{text:?}");
            assert_eq!(for_stream(text, false), text, "{text:?}");
        }
    }

    #[test]
    fn a_typed_line_is_an_answer_unless_empty_or_too_long() {
        let long = "x".repeat(MAX_TERMINAL_ANSWER + 1);
        let longest = "x".repeat(MAX_TERMINAL_ANSWER);
        for (line, ok) in [
            ("yes\n", Some("yes")),
            ("yes\r\n", Some("yes")),
            ("  spaced  \n", Some("  spaced  ")),
            ("no newline", Some("no newline")),
            ("\n", None),
            ("   \t\n", None),
            ("", None),
            (long.as_str(), None),
            (longest.as_str(), Some(longest.as_str())),
        ] {
            assert_eq!(typed_answer(line).ok(), ok, "{:?}", crate::text::head(line, 20));
        }
    }

    #[test]
    fn the_hint_names_the_command_and_the_door_but_no_token() {
        let h = how_to_answer("tsk_1", "http://127.0.0.1:4000", "/home/ada/.murmur/running/ses_1.json");
        assert!(h.contains("`mur answer tsk_1 TEXT`"), "{h}");
        assert!(h.contains("http://127.0.0.1:4000"), "{h}");
        assert!(h.contains("message.taskId"), "{h}");
    }
}
