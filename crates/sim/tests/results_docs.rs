//! The results docs show their plots: every PNG under `docs/results/` is
//! embedded by a results page (a PNG in `docs/results/<name>/` by
//! `docs/results/<name>.md`), and every image a results page or report
//! embeds exists. Regression test for issue 21 ("plots are there but
//! hidden").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results")
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

/// The targets of the Markdown image links `![alt](target)` in `md`.
fn images(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = md;
    while let Some(start) = rest.find("![") {
        rest = &rest[start + 2..];
        let Some(close) = rest.find("](") else { break };
        rest = &rest[close + 2..];
        let Some(end) = rest.find(')') else { break };
        out.push(rest[..end].trim().to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn image_links_are_parsed() {
    assert_eq!(
        images("a ![x](p/a.png) b ![](c.png)\n![t [1]](d.png)"),
        ["p/a.png", "c.png", "d.png"]
    );
}

#[test]
fn every_results_plot_is_embedded_and_every_embedded_plot_exists() {
    let dir = results_dir();
    let pages = files(&dir, "md");
    assert!(!pages.is_empty(), "no results pages in {}", dir.display());
    let mut embedded = BTreeSet::new();
    for page in &pages {
        let md = std::fs::read_to_string(page).unwrap();
        for target in images(&md) {
            let path = dir.join(&target);
            assert!(
                path.is_file(),
                "{} embeds {target}, which does not exist",
                page.display()
            );
            embedded.insert((page.clone(), path.canonicalize().unwrap()));
        }
    }
    let embedded_by_any: BTreeSet<&PathBuf> = embedded.iter().map(|(_, p)| p).collect();
    for png in files(&dir, "png") {
        assert!(
            embedded_by_any.contains(&png.canonicalize().unwrap()),
            "{} is embedded by no page in {}",
            png.display(),
            dir.display()
        );
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let folder = entry.unwrap().path();
        if !folder.is_dir() {
            continue;
        }
        let page = folder.with_extension("md");
        assert!(
            page.is_file(),
            "{} has no page {}",
            folder.display(),
            page.display()
        );
        for png in files(&folder, "png") {
            assert!(
                embedded.contains(&(page.clone(), png.canonicalize().unwrap())),
                "{} does not embed {}",
                page.display(),
                png.display()
            );
        }
        // The reports the simulator wrote there link their own plots.
        for report in files(&folder, "md") {
            let md = std::fs::read_to_string(&report).unwrap();
            for target in images(&md) {
                assert!(
                    folder.join(&target).is_file(),
                    "{} embeds {target}, which does not exist",
                    report.display()
                );
            }
        }
    }
}
