//! The core crate's layering, checked: every module of `rust-stream/src` imports only modules of
//! a lower row, or of its own row listed before it, and no modules import each other in a
//! circle; every name in the table is a module; and no source file of the three crates is over
//! the size budget: 700 physical lines (comments and blank lines counted) outside its tests.
//!
//! The rows are written down once, in `ARCHITECTURE.md`: a table whose rows read
//! `| <row number> | <modules, in order> | ... |`, the modules as paths under `rust-stream/src`
//! without `.rs` (`model` for the folder, `engine/poll` for one file). A module takes the place of
//! the longest path that names it. An *import* is a path into the crate in the code before its
//! `#[cfg(test)]` part, comments left out: one that starts with `crate::`, `super::` or `self::`,
//! or a relative one that starts with a child module of the file's own (`use poll::Intake;`,
//! `pub use queue::QueueCounts;` where the child's file exists, or an inline `lanes::Lanes::new()`
//! where the file declares `mod lanes;`). It points at the file of the longest module that path
//! names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, as its path under `src` without `.rs` and without a trailing `mod`/`lib`:
/// `["engine", "poll"]`, `["engine"]` for `engine/mod.rs`, `[]` for `lib.rs`.
type Module = Vec<String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Where a module stands in the layer table: its row, and its place in that row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    row: u32,
    order: usize,
}

/// The layer table of `ARCHITECTURE.md`: module path → its row and its place in the row.
fn layers() -> BTreeMap<String, Place> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let layers = parse_layers(&text);
    assert!(
        layers.len() > 5,
        "the layer table was not found in ARCHITECTURE.md: {layers:?}"
    );
    layers
}

/// The rows of a layer table, `| <row number> | <modules, in order> | ... |`, wherever they stand
/// in `text`.
fn parse_layers(text: &str) -> BTreeMap<String, Place> {
    let mut layers = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(number), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(row) = number.parse::<u32>() else {
            continue;
        };
        for (order, module) in modules.split(',').enumerate() {
            let module = module.trim().trim_matches('`').trim_end_matches('/');
            assert!(
                layers
                    .insert(module.to_owned(), Place { row, order })
                    .is_none(),
                "`{module}` stands twice in the layer table"
            );
        }
    }
    layers
}

fn module_of(relative: &Path) -> Module {
    let mut parts: Module = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Every `.rs` file under `src`, by module; `#[path = "x.rs"] mod name;` declarations map `name`.
fn files(src: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(src, &mut paths);
    let mut files = BTreeMap::new();
    for path in &paths {
        let relative = path.strip_prefix(src).unwrap().to_path_buf();
        files.insert(module_of(&relative), relative);
    }
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let relative = path.strip_prefix(src).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[path = \"") {
            rest = &rest[at + 10..];
            let target = &rest[..rest.find('"').unwrap()];
            let after = &rest[rest.find(']').unwrap() + 1..];
            let name = after
                .split("mod ")
                .nth(1)
                .and_then(|tail| {
                    tail.split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                })
                .unwrap();
            let mut module = module_of(relative);
            module.push(name.to_owned());
            let target = relative.parent().unwrap().join(target);
            files.insert(module, target);
        }
    }
    files
}

/// A file's text without its `//` comments (doc comments too), line for line: each line keeps
/// its place, so a line number in it is one in the file.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the test item marked by the `#[cfg(test)]` at `at` of `code` (without comments) ends:
/// at its `;` (a declaration: `mod tests;`) or with the block its first `{` opens.
fn test_item_end(code: &str, at: usize) -> usize {
    let item = &code[at..];
    match (item.find(';'), item.find('{')) {
        (Some(semi), brace) if brace.is_none_or(|brace| semi < brace) => at + semi + 1,
        (_, Some(brace)) => {
            let mut depth = 0;
            for (i, c) in item[brace..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            return at + brace + i + 1;
                        }
                    }
                    _ => {}
                }
            }
            code.len()
        }
        _ => code.len(),
    }
}

/// The code of a file without comments and without its test items: each `#[cfg(test)]` and the
/// item it marks (a `mod tests;` line, a `mod tests { .. }` block, a test-only helper), wherever
/// in the file it stands.
fn code(text: &str) -> String {
    let mut code = without_comments(text);
    while let Some(at) = code.find("#[cfg(test)]") {
        let end = test_item_end(&code, at);
        code.replace_range(at..end, "");
    }
    code
}

/// The crate paths named in `code`, written in `module` of a crate whose modules with a file are
/// `modules`: each as the module path it starts from plus its segments (brace groups of `use`
/// expanded one level, which is enough to tell which file is meant).
fn paths(module: &Module, code: &str, modules: &BTreeSet<Module>) -> Vec<Module> {
    let bytes = code.as_bytes();
    let inline = inline_modules(code);
    let declared = declared_modules(code);
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let tail = &code[at..];
        let starts_a_path = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':'
                || bytes[at - 1] == b'.');
        // The module the path starts from: `self` is the module it is written in (the file's,
        // or an inline `mod name { .. }` in it), `super` that module's parent.
        let here = || {
            let mut here = module.clone();
            for (start, end, name) in &inline {
                if *start < at && at < *end {
                    here.push(name.clone());
                }
            }
            here
        };
        let prefix = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|prefix| tail.starts_with(prefix))
            .filter(|_| starts_a_path);
        let mut base: Module = match prefix {
            Some("crate::") => Vec::new(),
            Some("self::") => here(),
            Some(_) => {
                let mut here = here();
                here.pop();
                here
            }
            // A relative path: it starts from the module it is written in when its first segment
            // is a child module of that module, used (`use child::..`) or declared (`mod child;`).
            None if starts_a_path
                && relative_child(tail, here(), modules, &declared, || in_use(&code[..at])) =>
            {
                here()
            }
            None => {
                at += tail.chars().next().unwrap().len_utf8();
                continue;
            }
        };
        at += prefix.map_or(0, str::len);
        let mut rest = &code[at..];
        // More `super::` hops.
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
            at += "super::".len();
        }
        let segment_end = |s: &str| {
            s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len())
        };
        let mut segments = Vec::new();
        loop {
            let end = segment_end(rest);
            if end == 0 {
                break;
            }
            segments.push(rest[..end].to_owned());
            rest = &rest[end..];
            at += end;
            match rest.strip_prefix("::") {
                Some(after) if !after.starts_with('{') => {
                    rest = after;
                    at += 2;
                }
                _ => break,
            }
        }
        let group = match rest.strip_prefix("::{") {
            Some(group) => Some(group),
            None if segments.is_empty() => rest.strip_prefix('{'),
            None => None,
        };
        if let Some(group) = group {
            // One level of a brace group: each item's leading path.
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    items.push(std::mem::take(&mut item));
                    break;
                }
                if c == ',' && depth == 1 {
                    items.push(std::mem::take(&mut item));
                } else {
                    item.push(c);
                }
            }
            for item in items {
                let item = item.trim();
                let end = item
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(item.len());
                let mut path = base.clone();
                path.extend(segments.iter().cloned());
                path.extend(
                    item[..end]
                        .split("::")
                        .filter(|part| !part.is_empty() && *part != "self")
                        .map(str::to_owned),
                );
                found.push(path);
            }
        } else {
            let mut path = base;
            path.extend(segments);
            found.push(path);
        }
    }
    found
}

/// Whether `tail` starts with `child::` where `here` has a child module `child` with a file, and
/// the path is one Rust reads from `here`: in a `use` (`in_use`), or `child` declared with
/// `mod child;` in the file.
fn relative_child(
    tail: &str,
    mut here: Module,
    modules: &BTreeSet<Module>,
    declared: &BTreeSet<String>,
    in_use: impl FnOnce() -> bool,
) -> bool {
    let end = tail
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(tail.len());
    if end == 0 || !tail[end..].starts_with("::") {
        return false;
    }
    let name = &tail[..end];
    here.push(name.to_owned());
    modules.contains(&here) && (declared.contains(name) || in_use())
}

/// Whether the code just before a path ends in the keyword `use` (`use`, `pub use`,
/// `pub(crate) use`), so the path is the start of a `use` item.
fn in_use(before: &str) -> bool {
    let before = before.trim_end();
    before.ends_with("use")
        && !before[..before.len() - 3].ends_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// Every `mod name` item of a file: its name, and where the code after the name starts.
fn module_items(code: &str) -> Vec<(&str, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = code[from..].find("mod ") {
        let at = from + offset;
        from = at + 4;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let rest = &code[at + 4..];
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if name_len > 0 {
            found.push((&rest[..name_len], at + 4 + name_len));
        }
    }
    found
}

/// The child modules a file declares with a file of their own: `mod name;` (any visibility).
fn declared_modules(code: &str) -> BTreeSet<String> {
    module_items(code)
        .into_iter()
        .filter(|(_, after)| code[*after..].trim_start().starts_with(';'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The inline modules of a file (`mod name { .. }`), outermost first: where each opens and closes,
/// and its name.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    for (name, after) in module_items(code) {
        let body = code[after..].trim_start();
        if !body.starts_with('{') {
            continue;
        }
        let open = code.len() - body.len();
        let mut depth = 0;
        let mut close = code.len();
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((open, close, name.to_owned()));
    }
    found
}

/// The file of the longest module a path names.
fn resolve<'a>(files: &'a BTreeMap<Module, PathBuf>, path: &[String]) -> Option<&'a PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|len| files.get(&path[..len].to_vec()))
}

/// The table entry a module stands under (the longest path that names it) and its place.
fn layer_of(layers: &BTreeMap<String, Place>, module: &Module) -> Option<(String, Place)> {
    if module.is_empty() {
        return layers.get("lib").map(|place| ("lib".to_owned(), *place));
    }
    (1..=module.len())
        .rev()
        .map(|len| module[..len].join("/"))
        .find_map(|prefix| layers.get(&prefix).map(|place| (prefix, *place)))
}

/// file → the files it imports.
fn imports(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let files = files(src);
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    let mut arrows: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (module, relative) in &files {
        let text = std::fs::read_to_string(src.join(relative)).unwrap();
        let targets = arrows.entry(relative.clone()).or_default();
        for path in paths(module, &code(&text), &modules) {
            if let Some(target) = resolve(&files, &path) {
                if target != relative {
                    targets.insert(target.clone());
                }
            }
        }
    }
    arrows
}

/// The sets of files that import each other in a loop (strongly connected, more than one file).
fn circles(arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<BTreeSet<PathBuf>> {
    let reach = |from: &PathBuf| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(file) = stack.pop() {
            for next in arrows.get(&file).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&PathBuf, BTreeSet<PathBuf>> =
        arrows.keys().map(|file| (file, reach(file))).collect();
    let mut circles: Vec<BTreeSet<PathBuf>> = Vec::new();
    for (file, reaches) in &reachable {
        if circles.iter().any(|circle| circle.contains(*file)) {
            continue;
        }
        let circle: BTreeSet<PathBuf> = reaches
            .iter()
            .filter(|other| reachable[other].contains(*file))
            .cloned()
            .collect();
        if circle.len() > 1 {
            circles.push(circle);
        }
    }
    circles
}

/// What the check finds in a tree of sources against a layer table.
#[derive(Debug, Default)]
struct Findings {
    /// Files whose module no row names.
    unplaced: Vec<String>,
    /// Imports of a module in a higher row than the importer's.
    upward: Vec<String>,
    /// Imports of a module of the importer's own row listed after the importer's module.
    out_of_order: Vec<String>,
    /// Sets of files that import each other in a loop.
    circles: Vec<String>,
    /// Table entries that name no module of the tree (a module renamed or removed).
    unknown: Vec<String>,
}

fn check(src: &Path, layers: &BTreeMap<String, Place>) -> Findings {
    let arrows = imports(src);
    let files = files(src);
    let module_by_file: BTreeMap<&PathBuf, &Module> =
        files.iter().map(|(module, file)| (file, module)).collect();
    let mut findings = Findings::default();
    for (file, targets) in &arrows {
        let Some((own, place)) = layer_of(layers, module_by_file[file]) else {
            findings.unplaced.push(file.display().to_string());
            continue;
        };
        for target in targets {
            let Some((named, target_place)) = layer_of(layers, module_by_file[target]) else {
                continue;
            };
            if target_place.row > place.row {
                findings.upward.push(format!(
                    "{} (row {}) imports {} (`{named}`, row {})",
                    file.display(),
                    place.row,
                    target.display(),
                    target_place.row
                ));
            } else if target_place.row == place.row
                && named != own
                && target_place.order > place.order
            {
                findings.out_of_order.push(format!(
                    "{} (`{own}`, row {}) imports {} (`{named}`, listed after it in that row)",
                    file.display(),
                    place.row,
                    target.display(),
                ));
            }
        }
    }
    findings.unknown = layers
        .keys()
        .filter(|name| {
            let module: Module = match name.as_str() {
                "lib" => Vec::new(),
                name => name.split('/').map(str::to_owned).collect(),
            };
            !files.keys().any(|file| file.starts_with(&module))
        })
        .cloned()
        .collect();
    findings.circles = circles(&arrows)
        .iter()
        .map(|circle| {
            circle
                .iter()
                .map(|file| file.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    findings
}

#[test]
fn the_core_crate_imports_only_downward_and_in_no_circle() {
    let findings = check(&root().join("rust-stream/src"), &layers());
    assert!(
        findings.unplaced.is_empty(),
        "modules in no row of the layer table in ARCHITECTURE.md: {:#?}",
        findings.unplaced
    );
    assert!(
        findings.unknown.is_empty(),
        "names in the layer table of ARCHITECTURE.md that are no module: {:?}",
        findings.unknown
    );
    assert!(
        findings.upward.is_empty(),
        "imports of a row above the importer's own:\n{}",
        findings.upward.join("\n")
    );
    assert!(
        findings.out_of_order.is_empty(),
        "imports of a module listed later in the importer's own row (move the import, or the \
         module, so that a row reads in the order its modules build on each other):\n{}",
        findings.out_of_order.join("\n")
    );
    assert!(
        findings.circles.is_empty(),
        "files that import each other in a circle:\n{}",
        findings.circles.join("\n")
    );
}

/// The most lines a source file of the workspace's crates holds outside its tests.
const MOST_LINES: usize = 700;

/// The lines a file counts against the budget: its physical lines, comments and blank lines
/// included, but not those of its test items (each `#[cfg(test)]` through the end of the item it
/// marks, wherever in the file it stands). For a file whose tests come last, that is its lines
/// before the first `#[cfg(test)]`.
fn counted_lines(text: &str) -> usize {
    let code = without_comments(text);
    let mut in_tests = 0;
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(test)]") {
        let at = from + found;
        let end = test_item_end(&code, at);
        in_tests += code[at..end].lines().count();
        from = end;
    }
    text.lines().count() - in_tests
}

/// Source files under `src` over [`MOST_LINES`] lines outside their tests ([`counted_lines`]),
/// largest first (a `tests.rs` child is all tests, and not counted).
fn oversized(src: &Path) -> Vec<(usize, PathBuf)> {
    let mut found: Vec<(usize, PathBuf)> = files(src)
        .into_values()
        .filter(|file| file.file_name().is_some_and(|name| name != "tests.rs"))
        .map(|file| {
            (
                counted_lines(&std::fs::read_to_string(src.join(&file)).unwrap()),
                file,
            )
        })
        .filter(|(lines, _)| *lines > MOST_LINES)
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    found
}

/// Files over the budget whose split is under way on another branch, tolerated while they are
/// over. One that is no longer over fails the check too, so the list empties as the splits land.
const BEING_SPLIT: &[&str] = &[];

/// No source file of the workspace's crates holds more than [`MOST_LINES`] lines outside its
/// tests, comments and blank lines counted: a file that grows past it is split by what it holds
/// (`cargo test --test layers` names each one over, with its count).
#[test]
fn no_source_file_is_over_the_size_budget() {
    let mut found = Vec::new();
    let mut split_elsewhere = Vec::new();
    for krate in ["rust-stream", "rust-stream-macros", "rust-stream-cli"] {
        for (lines, file) in oversized(&root().join(krate).join("src")) {
            let path = format!("{krate}/src/{}", file.display());
            if BEING_SPLIT.contains(&path.as_str()) {
                split_elsewhere.push(path);
            } else {
                found.push(format!("  {lines:>5}  {path}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} source files over {MOST_LINES} lines outside their tests:\n{}",
        found.len(),
        found.join("\n")
    );
    let landed: Vec<&&str> = BEING_SPLIT
        .iter()
        .filter(|path| !split_elsewhere.iter().any(|over| over == *path))
        .collect();
    assert!(
        landed.is_empty(),
        "within the budget now, so take them off `BEING_SPLIT`: {landed:?}"
    );
}

/// The budget's count is a file's physical lines outside its tests: a file of 701 lines, half of
/// them doc comments and blanks, is over; one of 700 lines and a test module after them is not; a
/// `mod tests;` declared before the code does not end the count; a `tests.rs` file is not counted.
#[test]
fn the_size_budget_counts_physical_lines_outside_tests() {
    let dir = std::env::temp_dir().join(format!("rust-stream-size-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("early")).unwrap();
    let constants = |count: usize| -> String {
        (0..count)
            .map(|i| format!("/// A constant.\npub const C{i}: u32 = {i};\n"))
            .collect()
    };
    std::fs::write(
        dir.join("lib.rs"),
        "pub mod big;\npub mod early;\npub mod fine;\n",
    )
    .unwrap();
    std::fs::write(dir.join("big.rs"), constants(350) + "\n").unwrap();
    let tests =
        "#[cfg(test)]\nmod tests {\n".to_owned() + &"    const T: u32 = 0;\n".repeat(50) + "}\n";
    std::fs::write(dir.join("fine.rs"), constants(350) + &tests).unwrap();
    std::fs::write(
        dir.join("early.rs"),
        "#[cfg(test)]\nmod tests;\n".to_owned() + &constants(350) + "\n",
    )
    .unwrap();
    std::fs::write(dir.join("early/tests.rs"), constants(400)).unwrap();
    let found = oversized(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![
            (701, PathBuf::from("early.rs")),
            (701, PathBuf::from("big.rs"))
        ]
    );
}

/// The reader behind the check finds what it must: an upward import and circles in a small tree,
/// through paths from the crate or a parent, and through relative paths into a child module.
#[test]
fn the_check_sees_an_upward_import_a_later_one_of_its_row_and_a_circle() {
    let dir = std::env::temp_dir().join(format!("rust-stream-layers-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("low")).unwrap();
    std::fs::create_dir_all(src.join("mid")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod low;\npub mod high;\npub mod mid;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("low/mod.rs"),
        "//! Low.\npub mod a;\npub mod b;\nuse crate::high::Top; // a comment: crate::nothing\n",
    )
    .unwrap();
    std::fs::write(src.join("low/a.rs"), "use super::b::B;\npub struct A;\n").unwrap();
    std::fs::write(
        src.join("low/b.rs"),
        "use super::{a::A, Low};\npub struct B;\n#[cfg(test)]\nmod tests { use crate::high::Top; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("high.rs"),
        "pub struct Top;\nmod inner {\n    use super::Top;\n}\n",
    )
    .unwrap();
    // A parent that uses its children by relative paths (a `pub use`, an inline path into a
    // declared child), while one child imports the parent back, below its tests' declaration: a
    // circle. What is no child of the module (another crate, a child without a file, a path
    // after `.` or `::`) is no import.
    std::fs::write(
        src.join("mid/mod.rs"),
        "mod c;\nmod d;\npub use c::C;\nuse serde::Serialize;\nuse e::E;\npub struct Mid;\n\
         fn make() -> d::D {\n    std::mem::drop(crate::low::Low);\n    x.d::<u8>();\n    d::D\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("mid/c.rs"),
        "#[cfg(test)]\nmod tests;\nuse super::Mid;\npub struct C;\n",
    )
    .unwrap();
    std::fs::write(src.join("mid/d.rs"), "pub struct D;\nfn f() { c::C; }\n").unwrap();
    let arrows = imports(&src);
    let file = |name: &str| PathBuf::from(name);
    assert_eq!(
        arrows[&file("low/mod.rs")],
        BTreeSet::from([file("high.rs")])
    );
    assert_eq!(
        arrows[&file("low/b.rs")],
        BTreeSet::from([file("low/a.rs"), file("low/mod.rs")]),
        "a brace group is expanded, the tests are left out"
    );
    assert!(
        arrows[&file("high.rs")].is_empty(),
        "`super` in an inline module is the file's own module"
    );
    assert_eq!(
        arrows[&file("mid/mod.rs")],
        BTreeSet::from([file("low/mod.rs"), file("mid/c.rs"), file("mid/d.rs")]),
        "a relative `use` of a child, and an inline path into a declared child, are imports"
    );
    assert!(
        arrows[&file("mid/d.rs")].is_empty(),
        "`c::` in a module without a child `c` is not the sibling"
    );
    assert_eq!(
        circles(&arrows),
        vec![
            BTreeSet::from([file("low/a.rs"), file("low/b.rs")]),
            BTreeSet::from([file("mid/c.rs"), file("mid/mod.rs")]),
        ]
    );

    // The same tree against tables: one row above another, and one row read in order.
    let table = |rows: &str| {
        parse_layers(&format!(
            "| row | modules | what |\n| --- | --- | --- |\n{rows}"
        ))
    };
    let tall = check(
        &src,
        &table("| 0 | `low`, `lib` |\n| 1 | `high`, `mid` |\n"),
    );
    assert_eq!(tall.upward.len(), 1, "low/mod.rs imports high.rs: {tall:?}");
    assert!(tall.upward[0].starts_with("low/mod.rs (row 0) imports high.rs"));
    assert!(tall.out_of_order.is_empty(), "{tall:?}");
    let wrong_order = check(
        &src,
        &table("| 0 | `high` |\n| 1 | `mid`, `low`, `lib` |\n"),
    );
    assert!(wrong_order.upward.is_empty(), "{wrong_order:?}");
    assert_eq!(
        wrong_order.out_of_order,
        vec!["mid/mod.rs (`mid`, row 1) imports low/mod.rs (`low`, listed after it in that row)"],
        "an import of a module later in the row"
    );
    let in_order = check(
        &src,
        &table("| 0 | `high` |\n| 1 | `low`, `mid`, `lib` |\n"),
    );
    assert!(
        in_order.out_of_order.is_empty() && in_order.upward.is_empty(),
        "{in_order:?}"
    );
    let stale = check(
        &src,
        &table("| 0 | `high`, `ghost`, `low/a` |\n| 1 | `low`, `mid`, `lib` |\n"),
    );
    assert_eq!(stale.unknown, vec!["ghost"], "a name that is no module");
    let short = check(&src, &table("| 0 | `high`, `low` |\n"));
    assert_eq!(
        short.unplaced.len(),
        4,
        "lib.rs and mid's three files: {short:?}"
    );
    assert_eq!(short.circles.len(), 2);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The modules a handler is written against (its outcome; `handler/`: the `Handle` trait, the
/// message in hand, middleware, batch handlers, what it sends): they stand on no queue service, so
/// the same handler can be driven by something other than the SQS poller.
const HANDLER_VOCABULARY: [&str; 2] = ["outcome", "handler"];

/// What the handler's vocabulary may not import: the client, the transport seam, its two backends
/// (in the crate), and the AWS SDK (outside it).
const BENEATH_THE_VOCABULARY: [&str; 4] = ["client", "transport", "account", "aws"];

/// Each import of a module under `forbidden` from a file of a module under `vocabulary`, and
/// each path into an `aws_sdk_*` crate in such a file, as `file imports what`.
fn vocabulary_imports(src: &Path, vocabulary: &[&str], forbidden: &[&str]) -> Vec<String> {
    let files = files(src);
    let module_by_file: BTreeMap<&PathBuf, &Module> =
        files.iter().map(|(module, file)| (file, module)).collect();
    let under = |names: &[&str], module: &Module| {
        names
            .iter()
            .any(|name| module.first().is_some_and(|first| first == name))
    };
    let mut found = Vec::new();
    for (file, targets) in imports(src) {
        if !under(vocabulary, module_by_file[&file]) {
            continue;
        }
        for target in targets {
            if under(forbidden, module_by_file[&target]) {
                found.push(format!("{} imports {}", file.display(), target.display()));
            }
        }
        let text = code(&std::fs::read_to_string(src.join(&file)).unwrap());
        let sdk: BTreeSet<&str> = text
            .match_indices("aws_sdk_")
            .filter(|(at, _)| {
                text[..*at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !c.is_alphanumeric() && c != '_')
            })
            .map(|(at, _)| {
                let rest = &text[at..];
                &rest[..rest
                    .find(|c: char| !c.is_alphanumeric() && c != '_')
                    .unwrap_or(rest.len())]
            })
            .collect();
        for krate in sdk {
            found.push(format!("{} imports {krate}", file.display()));
        }
    }
    found
}

/// The handler's vocabulary imports nothing of the SQS client, the transport, the account or
/// AWS (`ARCHITECTURE.md`, "The handler's vocabulary").
#[test]
fn the_handler_vocabulary_imports_no_client_transport_account_or_aws() {
    let found = vocabulary_imports(
        &root().join("rust-stream/src"),
        &HANDLER_VOCABULARY,
        &BENEATH_THE_VOCABULARY,
    );
    assert!(
        found.is_empty(),
        "the handler's vocabulary stands on a queue service:\n{}",
        found.join("\n")
    );
}

/// The handler's vocabulary stands in rows beneath the client, the transport and its backends:
/// with the rows checked, nothing it imports, directly or through another module, is any of them.
#[test]
fn the_handler_vocabulary_stands_beneath_the_client_and_the_transport() {
    let layers = layers();
    let row = |name: &str| {
        layers
            .get(name)
            .unwrap_or_else(|| panic!("`{name}` is not in the layer table"))
            .row
    };
    let lowest_beneath = BENEATH_THE_VOCABULARY
        .iter()
        .map(|name| row(name))
        .min()
        .unwrap();
    let above: Vec<String> = HANDLER_VOCABULARY
        .iter()
        .filter(|name| row(name) >= lowest_beneath)
        .map(|name| format!("`{name}` in row {}", row(name)))
        .collect();
    assert!(
        above.is_empty(),
        "the handler's vocabulary must stand below row {lowest_beneath} (the transport): {}",
        above.join(", ")
    );
}

/// The vocabulary's check sees an import of the transport (by a `use` and by an inline path) and
/// a path into an AWS SDK crate, in a file of the vocabulary and not elsewhere.
#[test]
fn the_vocabulary_check_sees_the_transport_and_the_aws_sdk() {
    let dir = std::env::temp_dir().join(format!("rust-stream-vocabulary-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("transport")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod context;\npub mod handler;\npub mod transport;\npub mod engine;\n",
    )
    .unwrap();
    std::fs::write(src.join("transport/mod.rs"), "pub struct Seam;\n").unwrap();
    std::fs::write(
        src.join("context.rs"),
        "use crate::transport::Seam;\nfn sdk(_: aws_sdk_sqs::Client) {}\n\
         // aws_sdk_sns in a comment is no import\n",
    )
    .unwrap();
    std::fs::write(
        src.join("handler.rs"),
        "use crate::context;\nfn f() { let _ = crate::transport::Seam; }\nfn g(_: my_aws_sdk_x::Y) {}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("engine.rs"),
        "use crate::transport::Seam;\nuse aws_sdk_sqs::Client;\n",
    )
    .unwrap();
    let found = vocabulary_imports(&src, &["context", "handler"], &["transport"]);
    std::fs::remove_dir_all(dir).unwrap();
    assert_eq!(
        found,
        vec![
            "context.rs imports transport/mod.rs",
            "context.rs imports aws_sdk_sqs",
            "handler.rs imports transport/mod.rs",
        ]
    );
}
