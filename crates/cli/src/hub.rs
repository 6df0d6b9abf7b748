//! `--model`: a checkpoint directory, or a Hugging Face Hub repository id fetched into the
//! Hugging Face cache (`$HF_HOME/hub`, the same cache the Python libraries use).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// An error of the hub, with its message.
fn fail<T>(msg: String) -> Result<T> {
    Err(Error::Hub(msg))
}

/// The checkpoint directory a model argument names: `arg` itself if it is a directory, else the
/// snapshot of the Hugging Face repository `arg` (`owner/name`, or `owner/name@revision`) in
/// the Hugging Face cache, fetched first unless `HF_HUB_OFFLINE` is set.
pub fn resolve(arg: &str) -> Result<PathBuf> {
    let path = Path::new(arg);
    if path.is_dir() {
        return Ok(path.to_owned());
    }
    if !is_repo_id(arg) || path.exists() {
        return fail(format!(
            "{arg} is not a directory: give a checkpoint directory (config.json, \
             model.safetensors, tokenizer.json) or a Hugging Face repository id such as \
             sentence-transformers/all-MiniLM-L6-v2"
        ));
    }
    fetch(arg)
}

/// The model a model argument names, in words, saying where it is read from: a local
/// directory (which wins over a Hugging Face repository of the same name) or the Hub.
pub fn describe(arg: &str) -> String {
    match (Path::new(arg).is_dir(), is_repo_id(arg)) {
        (true, true) => format!(
            "the model in the local directory {arg} (not the Hugging Face repository of that \
             name: a directory that exists wins)"
        ),
        (true, false) => format!("the model in {arg}"),
        (false, true) => format!("the model {arg} from the Hugging Face Hub"),
        (false, false) => format!("the model {arg}"),
    }
}

/// Whether `arg` is a local directory whose name also reads as a Hugging Face repository id,
/// so that the directory is used rather than the repository.
pub fn shadows_hub(arg: &str) -> bool {
    Path::new(arg).is_dir() && is_repo_id(arg)
}

/// Whether `arg` reads as `owner/name` (with an optional `@revision`) rather than a path.
fn is_repo_id(arg: &str) -> bool {
    let id = arg.split_once('@').map_or(arg, |(id, _)| id);
    let ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(id.split_once('/'), Some((owner, name)) if ok(owner) && ok(name))
}

#[cfg(feature = "hub")]
fn fetch(arg: &str) -> Result<PathBuf> {
    use hf_hub::api::sync::ApiBuilder;
    use hf_hub::{Cache, Repo, RepoType};

    let (id, revision) = arg.split_once('@').unwrap_or((arg, "main"));
    let repo = Repo::with_revision(id.to_owned(), RepoType::Model, revision.to_owned());
    let cache = Cache::from_env();
    let offline = std::env::var_os("HF_HUB_OFFLINE").is_some_and(|v| v != "0" && !v.is_empty());
    if offline {
        let Some(cached) = cache.repo(repo).get("config.json") else {
            return fail(format!(
                "HF_HUB_OFFLINE is set and {id} is not in the Hugging Face cache ({}); unset \
                 it to download, or pass a checkpoint directory instead",
                cache.path().display()
            ));
        };
        return Ok(parent(&cached));
    }
    let unreachable = |e: &dyn std::fmt::Display| {
        Error::Hub(format!(
            "could not fetch {id} from the Hugging Face Hub: {e}. Without network access, copy \
             the checkpoint to this machine and pass its directory instead, or set \
             HF_HUB_OFFLINE=1 to use only the cache in {}",
            cache.path().display()
        ))
    };
    let mut builder = ApiBuilder::from_cache(cache.clone())
        .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        builder = builder.with_endpoint(endpoint);
    }
    let api = builder.build().map_err(|e| unreachable(&e))?;
    let api = api.repo(repo);
    let info = api.info().map_err(|e| unreachable(&e))?;
    let files: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let has = |f: &str| files.iter().any(|x| x == f);
    for needed in ["config.json", "tokenizer.json"] {
        if !has(needed) {
            return fail(format!(
                "the Hugging Face repository {id} has no {needed}; Switchyard needs it"
            ));
        }
    }
    let get = |f: &str| api.get(f).map_err(|e| unreachable(&e));
    let config = get("config.json")?;
    get("tokenizer.json")?;
    if has("model.safetensors") {
        get("model.safetensors")?;
    } else if has("model.safetensors.index.json") {
        for shard in shards(&get("model.safetensors.index.json")?, &files)? {
            get(&shard)?;
        }
    } else {
        return fail(format!(
            "the Hugging Face repository {id} has no model.safetensors; Switchyard reads \
             safetensors weights only"
        ));
    }
    // The sentence-transformers files, where the repository has them: modules.json, its
    // settings and prompts, and each module's config.json and weights (a Dense module's).
    if has("modules.json") {
        for dir in module_dirs(&get("modules.json")?)? {
            for file in [format!("{dir}/config.json"), format!("{dir}/model.safetensors")] {
                if has(&file) {
                    get(&file)?;
                }
            }
        }
        for settings in ["sentence_bert_config.json", "config_sentence_transformers.json"] {
            if has(settings) {
                get(settings)?;
            }
        }
    }
    Ok(parent(&config))
}

#[cfg(not(feature = "hub"))]
fn fetch(arg: &str) -> Result<PathBuf> {
    fail(format!(
        "{arg} is not a directory, and this build cannot fetch from the Hugging Face Hub: \
         rebuild switchyard with the cargo feature `hub`, or pass a checkpoint directory"
    ))
}

/// The snapshot directory holding a fetched file.
#[cfg(feature = "hub")]
fn parent(file: &Path) -> PathBuf {
    file.parent().map_or_else(PathBuf::new, Path::to_owned)
}

/// A JSON file, parsed.
#[cfg(feature = "hub")]
fn json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Hub(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| Error::Hub(format!("{}: {e}", path.display())))
}

/// The folders of the modules a `modules.json` lists (the Transformer module's is empty).
#[cfg(feature = "hub")]
fn module_dirs(modules: &Path) -> Result<Vec<String>> {
    Ok(json(modules)?
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m.get("path").and_then(serde_json::Value::as_str))
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default())
}

/// The shard files a `model.safetensors.index.json` lists, each one of the repository's
/// `files`: an error for any other name (such as `../x`), which is never fetched.
#[cfg(feature = "hub")]
fn shards(index: &Path, files: &[String]) -> Result<Vec<String>> {
    let v = json(index)?;
    let mut shards: Vec<String> = v["weight_map"]
        .as_object()
        .map(|m| m.values().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    shards.sort();
    shards.dedup();
    if let Some(stray) = shards.iter().find(|s| !files.contains(s)) {
        return fail(format!(
            "{}: names the shard {stray:?}, which is not a file of the repository",
            index.display()
        ));
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "hub")]
    #[test]
    fn an_index_can_name_only_the_repositorys_files() {
        let dir = std::env::temp_dir().join(format!("switchyard-hub-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("model.safetensors.index.json");
        let files = ["a.safetensors".to_owned(), "b.safetensors".to_owned()];
        let write = |map: serde_json::Value| {
            std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap()
        };
        write(
            serde_json::json!({"x": "b.safetensors", "y": "a.safetensors", "z": "a.safetensors"}),
        );
        assert_eq!(shards(&index, &files).unwrap(), files);
        write(serde_json::json!({"x": "a.safetensors", "y": "../../outside"}));
        let e = shards(&index, &files).unwrap_err().to_string();
        assert!(e.contains("\"../../outside\", which is not a file of the repository"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn repo_ids_and_paths_are_told_apart() {
        for id in ["sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5@main"] {
            assert!(is_repo_id(id), "{id}");
        }
        for path in ["./model", "/abs/dir", "a/b/c", "model", "../x/y", "owner/"] {
            assert!(!is_repo_id(path), "{path}");
        }
    }
}
