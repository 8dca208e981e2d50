//! A strategy that wraps another forwards every hook of the `Strategy` trait and of
//! the service's `Served` (its supertrait with the `service` feature): a hook
//! it left to the trait's default would silently do nothing for the wrapped strategy
//! (a restock it did not hear of, a stock view it did not show). Read from the source
//! with `syn`, so a hook added to the trait fails here until every wrapper forwards it.

use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn parse(relative: &str) -> syn::File {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The methods of `trait Strategy` and `trait Served`.
fn trait_methods() -> BTreeSet<String> {
    let mut methods = trait_methods_of("src/strategies/contract.rs", "Strategy");
    methods.extend(trait_methods_of("src/strategies/card.rs", "Served"));
    methods
}

/// The methods of `trait <name>` in `file`.
fn trait_methods_of(file: &str, name: &str) -> BTreeSet<String> {
    let file = parse(file);
    let strategy = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Trait(t) if t.ident == name => Some(t),
            _ => None,
        })
        .unwrap_or_else(|| panic!("trait {name}"));
    strategy
        .items
        .iter()
        .filter_map(|item| match item {
            syn::TraitItem::Fn(f) => Some(f.sig.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// The methods of `impl Strategy for <wrapper>` and `impl Served for <wrapper>` in
/// `file`, each with its body's tokens.
fn implemented(file: &str, wrapper: &str) -> BTreeMap<String, String> {
    let file = parse(file);
    let of = |name: &str| {
        file.items
            .iter()
            .find_map(|item| match item {
                syn::Item::Impl(i)
                    if i.trait_.as_ref().is_some_and(|(_, path, _)| {
                        path.segments.last().is_some_and(|s| s.ident == name)
                    }) && matches!(&*i.self_ty, syn::Type::Path(p)
                        if p.path.segments.last().is_some_and(|s| s.ident == wrapper)) =>
                {
                    Some(i)
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("impl {name} for {wrapper}"))
    };
    of("Strategy")
        .items
        .iter()
        .chain(&of("Served").items)
        .filter_map(|item| match item {
            syn::ImplItem::Fn(f) => Some((
                f.sig.ident.to_string(),
                f.block.to_token_stream().to_string(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn the_mistakes_wrapper_forwards_every_hook() {
    let hooks = trait_methods();
    assert!(
        hooks.len() >= 8,
        "too few methods read from the trait: {hooks:?}"
    );
    let forwarded = implemented("src/strategies/distributed/mistakes.rs", "WithMistakes");
    let missing: Vec<&String> = hooks
        .iter()
        .filter(|h| !forwarded.contains_key(*h))
        .collect();
    assert!(
        missing.is_empty(),
        "WithMistakes leaves these hooks to the trait's default, so the strategy it wraps \
         never hears of them: {missing:?}"
    );
    // Each passes the call on to the wrapped strategy, but the two the wrapper exists
    // for (its own mistakes).
    let own = ["mistakes", "deduct_mistaken"];
    let dropped: Vec<&String> = forwarded
        .iter()
        .filter(|(name, body)| {
            !own.contains(&name.as_str()) && !body.contains(&format!("self . strategy . {name}"))
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        dropped.is_empty(),
        "WithMistakes defines these hooks without calling the wrapped strategy's: {dropped:?}"
    );
}
