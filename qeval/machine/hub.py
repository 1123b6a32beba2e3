"""A Hugging Face model id (`model: {hf: org/name, revision: ...}`) as a folder: its snapshot in the local
Hugging Face cache (HF_HOME / HF_HUB_CACHE), found or downloaded by huggingface_hub itself. Offline
(HF_HUB_OFFLINE, or a hub that cannot be reached) only the cache is read."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, QevalError


def check_repo_id(repo_id: str) -> str:
    """The id as the hub client accepts it, or a ValueError saying why not (for the campaign file's error)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ValueError(f"not a Hugging Face model id ({str(e).splitlines()[0]})") from None
    return repo_id


def cache_folder(cache_dir: Path | None = None) -> Path:
    from huggingface_hub import constants

    return Path(cache_dir or constants.HF_HUB_CACHE).expanduser()


def snapshot(repo_id: str, revision: str = "main", *, local_only: bool = False,
             cache_dir: Path | None = None) -> Path:
    """The snapshot folder of `repo_id` at `revision` (a branch, a tag or a commit hash). `local_only`: never
    ask the hub, whatever HF_HUB_OFFLINE says (`qeval doctor`). A model the cache lacks while the hub cannot be
    asked is a QevalError (exit 3: this machine lacks it); one the hub says does not exist, a ConfigError (exit 2)."""
    from huggingface_hub import errors, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    incomplete = getattr(errors, "IncompleteSnapshotError", ())  # huggingface_hub 2: a snapshot in part only

    where = cache_folder(cache_dir)
    name = f"{repo_id} at revision {revision}"
    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=where, local_files_only=local_only))
    except incomplete as e:
        # downloaded in part on purpose (`hf download --include ...`): what the engines load is what is there
        folder = Path(e.snapshot_path)
        if (folder / "config.json").is_file():
            return folder
        raise QevalError(f"the Hugging Face model {name} is in the cache in part only, without its config.json "
                         f"({folder}): download it whole with `{_download(repo_id, revision)}`") from None
    except (RevisionNotFoundError, GatedRepoError, RepositoryNotFoundError) as e:
        raise ConfigError(f"Hugging Face model {name}: {str(e).splitlines()[0]}", where="model.hf") from None
    except LocalEntryNotFoundError:
        why = "qeval doctor reads the cache only" if local_only else "HF_HUB_OFFLINE is set, or the hub is unreachable"
        raise QevalError(f"the Hugging Face model {name} is not in the Hugging Face cache at {where} ({why}); "
                         f"download it where the hub is reachable with `{_download(repo_id, revision)}` into "
                         "this cache (HF_HUB_CACHE or HF_HOME)") from None


def _download(repo_id: str, revision: str) -> str:
    return f"hf download {repo_id}" + ("" if revision == "main" else f" --revision {revision}")
