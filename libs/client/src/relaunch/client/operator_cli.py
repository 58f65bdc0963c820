"""`relaunch nodes`, `relaunch nodes clear NODE` and `relaunch jobs mode`: the API's node view and the
operator's calls that change state (each needs the API's bearer token).

Exit codes as for every `relaunch` command: 0 ok, 1 not found, 2 usage or configuration (a missing
or refused token included), 3 a server is unreachable.

The token is read from a file (--token-file, or RELAUNCH_API_TOKEN_FILE as the API reads it), never
taken on the command line, where `ps` and the shell history would keep it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from . import settings as client_settings
from .terminal import shown

EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3

console = Console()
err = Console(stderr=True)



def who() -> str:
    """Who is asking, for the record: $USER, else the name of the process's uid, else "uid N" (a cron
    job or a container has no $USER; an override or clearance recorded as '' says nothing)."""
    user = os.environ.get("USER", "").strip()
    if user:
        return user
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.getuid()}"

def _api() -> str:
    return client_settings.api_url()


def _client() -> httpx.Client:
    """The HTTP client (tests put one here that talks to the app in-process)."""
    return httpx.Client(base_url=_api(), timeout=10)


def _call(method: str, path: str, **kwargs) -> dict:
    try:
        with _client() as http:
            resp = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        err.print(f"[red]cannot reach the relaunch API at {shown(_api())}[/red]: {shown(str(exc))}\n"
                  "Is the stack up (make up) and RELAUNCH_API_URL set (source .run/env)?")
        raise typer.Exit(EXIT_UNREACHABLE) from exc
    try:
        body = resp.json()
    except ValueError:
        body = {"detail": resp.text[:2000]}
    if resp.status_code < 400:
        return body
    detail = shown(str(body.get("detail", resp.text[:2000])))
    hint = f"\n{shown(body['hint'])}" if body.get("hint") else ""
    err.print(f"[red]the API answered {resp.status_code}[/red]: {detail}{hint}", soft_wrap=True)
    if resp.status_code == 404:
        raise typer.Exit(EXIT_NOT_FOUND)
    # 503 on an endpoint that changes state means "no token configured": a configuration problem.
    auth_off = resp.status_code == 503 and "TOKEN_FILE" in str(body.get("detail", ""))
    raise typer.Exit(EXIT_USAGE if resp.status_code < 500 or auth_off else EXIT_UNREACHABLE)


nodes_app = typer.Typer(help="Nodes across jobs, and forgetting a repaired node's record.")


def _token(token_file: Path | None) -> str:
    if token_file is None:
        err.print("[red]no token file[/red]: pass --token-file PATH or set RELAUNCH_API_TOKEN_FILE "
                  "(the token is never taken on the command line)")
        raise typer.Exit(EXIT_USAGE)
    try:
        return token_file.read_text().strip()
    except OSError as exc:
        err.print(f"[red]cannot read the token file {shown(str(token_file))}[/red]: {shown(exc.strerror or '')}")
        raise typer.Exit(EXIT_USAGE) from exc


@nodes_app.callback(invoke_without_command=True)
def nodes(ctx: typer.Context, cluster: str = typer.Option(None, help="Only this cluster."),
          history: int = typer.Option(5, min=0, max=500, help="Non-healthy readings to show per node."),
          as_json: bool = typer.Option(False, "--json", help="The API's JSON: {nodes: [...]}.")) -> None:
    """Nodes across jobs: latest GPU health, non-healthy history, jobs whose advice excluded them."""
    if ctx.invoked_subcommand is not None:
        return
    data = _call("GET", "/v1/nodes", params={"history": history, **({"cluster": cluster} if cluster else {})})
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table("cluster", "node", "health", "reasons", "last reading", "non-healthy", "excluded by", "cleared")
    for n in data["nodes"]:
        colour = {"healthy": "green", "degraded": "yellow", "failed": "red"}.get(n["verdict"], "dim")
        cleared = n.get("cleared") or {}
        table.add_row(shown(n["cluster"]), shown(n["node"]), f"[{colour}]{shown(n['verdict'])}[/{colour}]",
                      shown("; ".join(n["reasons"])[:80]), (n["at"] or "-")[:19],
                      str(sum(1 for h in n["history"] if not h.get("forgotten")) if cleared else n["history_total"]),
                      shown(", ".join(f"{x['job_id']} (gen {x['generation']})"
                                       for x in n["excluded_by"] if not x.get("forgotten"))) or "-",
                      shown(f"{(cleared.get('at') or '')[:19]} {cleared.get('actor') or ''}".strip()) or "-")
    console.print(table)
    if not data["nodes"]:
        console.print("no node readings yet (gpu-probe publishes them)")


def jobs_mode(job_id: str = typer.Argument(..., help="Slurm job id."),
              mode: str = typer.Argument(..., help="observe (plan and record, never touch Slurm) or act."),
              cluster: str = typer.Option(None, help="Cluster name (default: $RELAUNCH_CLUSTER)."),
              reason: str = typer.Option("", help="Why, for the audit trail."),
              actor: str = typer.Option(None, help="Who asks (default: $USER, else the name of your uid)."),
              token_file: Path = typer.Option(None, "--token-file", envvar="RELAUNCH_API_TOKEN_FILE",
                                              help="File holding the API's bearer token.")) -> None:
    """Record an operator override of a job's mode (needs the API's token)."""
    if mode not in ("observe", "act"):
        err.print(f"[red]mode must be observe or act[/red], not {shown(mode)!r}")
        raise typer.Exit(EXIT_USAGE)
    token = _token(token_file)
    cluster = client_settings.cluster(cluster)
    body = {"mode": mode, "reason": reason, "actor": actor if actor is not None else who()}
    data = _call("POST", f"/v1/jobs/{cluster}/{job_id}/mode", json=body,
                 headers={"Authorization": f"Bearer {token}"})
    console.print(f"job {shown(job_id)} on {shown(cluster)}: mode override [bold]{mode}[/bold] recorded "
                  f"(override {data['override']['id']}). {shown(data.get('note', ''))}", soft_wrap=True)


@nodes_app.command("clear")
def nodes_clear(node: str = typer.Argument(..., help="The node's Slurm name."),
                cluster: str = typer.Option(None, help="Cluster name (default: $RELAUNCH_CLUSTER)."),
                reason: str = typer.Option("", help="What was repaired, for the audit trail."),
                actor: str = typer.Option(None, help="Who asks (default: $USER, else the name of your uid)."),
                token_file: Path = typer.Option(None, "--token-file", envvar="RELAUNCH_API_TOKEN_FILE",
                                                help="File holding the API's bearer token.")) -> None:
    """Forget a repaired node's record: the decider stops counting its exclusions and gpu-probe
    readings from before now (audited in the ledger; needs the API's token)."""
    token = _token(token_file)
    cluster = client_settings.cluster(cluster)
    body = {"reason": reason, "actor": actor if actor is not None else who()}
    data = _call("POST", f"/v1/nodes/{cluster}/{node}/clear", json=body, headers={"Authorization": f"Bearer {token}"})
    found = data["clearance"]
    console.print(f"node {shown(node)} on {shown(cluster)}: record cleared at {shown(found['at'][:19])} "
                  f"(clearance {found['id']}; {found['forgotten_exclusions']} jobs' exclusions forgotten). "
                  f"{shown(data.get('note', ''))}", soft_wrap=True)


def register(app: typer.Typer, jobs_app: typer.Typer) -> None:
    app.add_typer(nodes_app, name="nodes")
    jobs_app.command("mode")(jobs_mode)
