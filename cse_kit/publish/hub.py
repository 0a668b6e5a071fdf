"""The push: the published folder uploaded to a Hugging Face Hub repository in one commit, and the command that
does it."""

from __future__ import annotations

import shlex
from pathlib import Path

from .run import PublishError


def push(folder, repo_id: str, *, private: bool = False) -> str:
    """Upload the published folder to the Hub's repository repo_id (created if missing) as one commit; returns the
    commit's URL. Without a token, offline or with the Hub unreachable: PublishError, nothing uploaded."""
    import httpx
    from huggingface_hub import CommitOperationAdd, HfApi, constants, get_token
    from huggingface_hub.errors import HfHubHTTPError

    from ..models import hub_unreachable, offline_mode

    folder = Path(folder)
    left = f"nothing was uploaded; the folder is {folder}"
    if offline_mode():
        raise PublishError(f"HF_HUB_OFFLINE=1 is set, so nothing can reach the Hub: unset it and push again ({left})")
    token = get_token()
    if not token:
        raise PublishError(f"no Hugging Face token: run `hf auth login` (a token with write access) or set HF_TOKEN, "
                           f"then push again ({left})")
    unreachable = hub_unreachable()
    if unreachable:
        raise PublishError(f"the Hub cannot be reached ({unreachable}): push again when it can (HF_ENDPOINT names "
                           f"another endpoint; {left})")
    api = HfApi(endpoint=constants.ENDPOINT, token=token)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    try:
        api.create_repo(repo_id, private=private or None, exist_ok=True)  # else the namespace's default
        info = api.create_commit(repo_id, [CommitOperationAdd(path_in_repo=p.relative_to(folder).as_posix(),
                                                              path_or_fileobj=str(p)) for p in files],
                                 commit_message=f"cse-kit publish: {folder.name}",
                                 commit_description="Model, model card (README.md) and results, written by "
                                                    "`cse-kit publish` from the run's results-store record.")
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else None
        fix = ("the token was refused: `hf auth login` with a token that can write to " + repo_id
               if status in (401, 403) else f"the Hub answered {status}")
        raise PublishError(f"{fix} ({str(err).splitlines()[0]}); {left}, not published") from None
    except (OSError, httpx.TransportError) as err:
        raise PublishError(f"the upload to {constants.ENDPOINT} broke off ({type(err).__name__}: {err}); the commit "
                           f"was not made, so nothing is published; push again ({left})") from None
    return info.commit_url


def push_command(target: str, out, *, repo_id: str, results_dir=None, license: str | None = None, st: bool = True,
                 private: bool = False) -> str:
    """The `cse-kit publish ... --push` command that pushes what a publish with these options wrote, every option
    given kept (a run of another store is found again only with its --results-dir), quoted for a shell."""
    args = ["cse-kit", "publish", str(target), "--out", str(out), "--repo-id", repo_id]
    args += ["--results-dir", str(results_dir)] if results_dir is not None else []
    args += ["--license", license] if license else []
    args += [] if st else ["--no-st"]
    return shlex.join(args + ["--push"] + (["--private"] if private else []))
