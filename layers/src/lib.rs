//! A crate's module graph, read with [`syn`]: which module uses which, and the circles
//! and upward imports in it. `tests/layers.rs` declares every workspace crate's layers
//! and holds each crate to them.
//!
//! The graph is read from one crate root (`src/lib.rs`, `src/main.rs`, a
//! `src/bin/*.rs`), following its `mod` declarations (file and inline modules). Every
//! path in a module counts as a use of the deepest module it names: `use` trees,
//! paths in types and expressions, and paths inside macro calls (`format!`, `json!`),
//! whose tokens are scanned for `crate::`, `super::`, `self::` and child-module paths.
//! Comments and strings are not code, so they never count. A path through a name
//! imported from elsewhere is counted at its `use`, which names the module.
//!
//! A module's uses of its own descendants are not edges either, the crate root's
//! included: a folder module declares its children and drives them (`chaos::run`
//! runs `chaos::lab`), and its children may use what it defines (`use super::*`); the
//! folder is one unit. So circles are looked for between units: every use is lifted
//! to the two modules just under the lowest module containing both ends
//! (`chaos::html -> flash` is `chaos -> flash`), and a circle through a folder's
//! children is still seen.
//!
//! Not seen: a use through a name the crate root defines or re-exports (`crate::Plan`,
//! `crate::Redis`) counts as a use of the root, which is in no layer and uses nothing,
//! so a circle through the root's own items (a type defined in `lib.rs` that names a
//! module, which names it back) goes unnoticed. Keep a root to declarations and
//! re-exports, or mind that.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use syn::visit::Visit;

/// The modules of one crate tree and the uses between them.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    /// Module path (`strategies::txn`; the root is ``) → the child modules it declares.
    pub modules: BTreeMap<String, BTreeSet<String>>,
    /// Module → module it uses (itself excluded) → one path that does it.
    uses: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    /// Reads the tree rooted at `root` (a crate root file).
    ///
    /// # Panics
    /// On a file that cannot be read or parsed, or a `mod` whose file is missing.
    pub fn read(root: &Path) -> Graph {
        let dir = root.parent().expect("a root in a directory").to_path_buf();
        let mut sources = Vec::new();
        let mut graph = Graph::default();
        let file = parse(root);
        graph.load(Vec::new(), file.items, &dir, &mut sources);
        for (module, items) in sources {
            graph.add_items(&module, &items);
        }
        graph
    }

    /// Declares `module` with `items`, and every child module they declare (a child's
    /// file is `dir/name.rs` or `dir/name/mod.rs`; its own children live in `dir/name`).
    fn load(
        &mut self,
        module: Vec<String>,
        items: Vec<syn::Item>,
        dir: &Path,
        sources: &mut Vec<(String, Vec<syn::Item>)>,
    ) {
        let mut children = BTreeSet::new();
        for item in &items {
            let syn::Item::Mod(m) = item else { continue };
            let name = m.ident.to_string();
            assert!(
                !m.attrs.iter().any(|a| a.path().is_ident("path")),
                "`mod {name}` in {dir:?} has a #[path]: this reader does not follow it"
            );
            children.insert(name.clone());
            let mut path = module.clone();
            path.push(name.clone());
            let child_dir = dir.join(&name);
            match &m.content {
                Some((_, inline)) => self.load(path, inline.clone(), &child_dir, sources),
                None => {
                    let file = [dir.join(format!("{name}.rs")), child_dir.join("mod.rs")]
                        .into_iter()
                        .find(|f| f.exists())
                        .unwrap_or_else(|| panic!("no file for `mod {name}` in {dir:?}"));
                    self.load(path, parse(&file).items, &child_dir, sources);
                }
            }
        }
        let name = module.join("::");
        self.modules.insert(name.clone(), children);
        sources.push((name, items));
    }

    /// Adds the uses in `code` (Rust items), as if written in `module`: for a check of
    /// the check, a line added to a copy of the graph.
    ///
    /// # Panics
    /// If `code` does not parse as items.
    pub fn add_source(&mut self, module: &str, code: &str) {
        let file: syn::File = syn::parse_str(code).expect("items");
        self.add_items(module, &file.items);
    }

    fn add_items(&mut self, module: &str, items: &[syn::Item]) {
        let here: Vec<String> = module
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let children = self.modules.get(module).cloned().unwrap_or_default();
        let mut paths = Paths::default();
        for item in items {
            paths.visit_item(item);
        }
        for path in paths.found {
            let Some(absolute) = absolute(&here, &children, &path) else {
                continue;
            };
            if let Some(target) = self.resolve(&absolute)
                && target != module
                && !(module.is_empty() || target.starts_with(&format!("{module}::")))
            {
                self.uses
                    .entry(module.to_string())
                    .or_default()
                    .entry(target)
                    .or_insert_with(|| path.join("::"));
            }
        }
    }

    /// The deepest module a path goes through.
    fn resolve(&self, path: &[String]) -> Option<String> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| self.modules.contains_key(m))
    }

    /// Every use: (from, to, a path that does it).
    pub fn edges(&self) -> impl Iterator<Item = (&String, &String, &String)> {
        self.uses
            .iter()
            .flat_map(|(from, to)| to.iter().map(move |(t, path)| (from, t, path)))
    }

    /// Each use lifted to the units it joins: `(from, to)` become the modules just
    /// under the lowest module containing both; a use of an ancestor (a child's
    /// `super::`) joins no two units and is left out.
    fn unit_edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut lifted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to, path) in self.edges() {
            let f: Vec<&str> = from.split("::").filter(|s| !s.is_empty()).collect();
            let t: Vec<&str> = to.split("::").filter(|s| !s.is_empty()).collect();
            let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if common >= t.len() || common >= f.len() {
                continue; // one contains the other
            }
            let (a, b) = (f[..=common].join("::"), t[..=common].join("::"));
            lifted
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| format!("{from} -> {to}: {path}"));
        }
        lifted
    }

    /// Each circle (a strongly connected set of two or more units, see the module
    /// docs), with the uses that make it.
    pub fn circles(&self) -> Vec<String> {
        let uses = self.unit_edges();
        let names: Vec<&String> = self.modules.keys().collect();
        let reach = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(m) = todo.pop() {
                for next in uses.get(&m).into_iter().flat_map(|t| t.keys()) {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let reachable: BTreeMap<&String, BTreeSet<String>> =
            names.iter().map(|m| (*m, reach(m))).collect();
        let mut done = BTreeSet::new();
        let mut circles = Vec::new();
        for m in &names {
            if done.contains(*m) || !reachable[m].contains(*m) {
                continue;
            }
            let members: BTreeSet<&String> = names
                .iter()
                .copied()
                .filter(|o| *o == *m || (reachable[m].contains(*o) && reachable[o].contains(*m)))
                .collect();
            let edges: Vec<String> = uses
                .iter()
                .flat_map(|(f, to)| to.iter().map(move |(t, path)| (f, t, path)))
                .filter(|(f, t, _)| members.contains(f) && members.contains(t))
                .map(|(f, t, path)| format!("  {f} -> {t}    ({path})"))
                .collect();
            circles.push(format!(
                "circle of {}:\n{}",
                members.len(),
                edges.join("\n")
            ));
            done.extend(members.into_iter().cloned());
        }
        circles
    }

    /// Uses that reach up: `layers` lists the top-level modules, bottom layer first
    /// (a layer may hold several); a module may use its own layer and those below. A
    /// top-level module in no layer is reported too.
    pub fn upward(&self, layers: &[&[&str]]) -> Vec<String> {
        let rank = |m: &str| {
            let top = m.split("::").next().unwrap_or_default();
            layers.iter().position(|layer| layer.contains(&top))
        };
        let mut found: Vec<String> = self
            .modules
            .keys()
            .filter(|m| !m.is_empty() && !m.contains("::") && rank(m).is_none())
            .map(|m| format!("  {m}: in no layer"))
            .collect();
        found.extend(
            self.edges()
                .filter_map(|(f, t, path)| match (rank(f), rank(t)) {
                    (Some(a), Some(b)) if b > a => Some(format!("  {f} -> {t}    ({path})")),
                    _ => None,
                }),
        );
        found
    }
}

fn parse(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"))
}

/// A path as written, made absolute from the module it is in: `crate::a`, `super::a`,
/// `self::a`, or a child module's name; anything else (a name imported, another crate)
/// is not one of this crate's modules by itself.
fn absolute(here: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = here.len().checked_sub(ups)?;
            Some(here[..base].iter().chain(&path[ups..]).cloned().collect())
        }
        name if children.contains(name) => Some(here.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// Every path in some items, as its segments; inline modules are left to their own
/// pass.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Its items are its own module's (read apart); only its attributes are here.
        for attr in &m.attrs {
            self.visit_attribute(attr);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.found
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        use_tree(&item.tree, &mut Vec::new(), &mut self.found);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        macro_paths(mac.tokens.clone(), &mut self.found);
    }
}

/// The paths of a `use` tree (`a::{b, c::d}` is `a::b` and `a::c::d`).
fn use_tree(tree: &syn::UseTree, prefix: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_tree(&p.tree, prefix, found);
            prefix.pop();
        }
        syn::UseTree::Name(n) => found.push(with(prefix, &n.ident)),
        syn::UseTree::Rename(r) => found.push(with(prefix, &r.ident)),
        syn::UseTree::Glob(_) => found.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_tree(tree, prefix, found);
            }
        }
    }
}

fn with(prefix: &[String], last: &syn::Ident) -> Vec<String> {
    let mut path = prefix.to_vec();
    // `use super::{self}` names the module itself.
    if last != "self" {
        path.push(last.to_string());
    }
    path
}

/// Paths in a macro call's tokens: every `a::b::c` run of identifiers (`absolute`
/// keeps those that start at `crate`, `super`, `self` or a child module).
fn macro_paths(tokens: proc_macro2::TokenStream, found: &mut Vec<Vec<String>>) {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(group) => macro_paths(group.stream(), found),
            TokenTree::Ident(first) => {
                let mut path = vec![first.to_string()];
                let mut j = i + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    j += 3;
                }
                if path.len() > 1 {
                    found.push(path);
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
}
