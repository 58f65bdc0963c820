"""The `relaunch` command line. Exit codes: 0 ok, 1 not found, 2 usage, 3 a server is unreachable."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from relaunch.common.optin import GRAMMAR_VERSION, parse_comment
from relaunch.common.outcome_words import outcome
from relaunch.common.schemas import dump

from . import classify_command, inject, operator_cli
from . import settings as client_settings
from .events import EVENTS_AND_ADVICE, EventStream, subscribe
from .goodput_words import goodput_lines
from .narration import describe, recovery_seconds
from .terminal import shown, unwrap_help

app = typer.Typer(help="relaunch: keeps GPU training runs on Slurm moving.", no_args_is_help=True,
                  add_completion=False)
jobs_app = typer.Typer(help="Jobs in the ledger.")
policy_app = typer.Typer(help="The opt-in grammar of job comments.")
events_app = typer.Typer(help="Live events.")
app.add_typer(jobs_app, name="jobs")
app.add_typer(policy_app, name="policy")
app.add_typer(events_app, name="events")
app.add_typer(inject.app, name="inject")
operator_cli.register(app, jobs_app)  # relaunch nodes, relaunch jobs mode

console = Console()
err = Console(stderr=True)

EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def _api() -> str:
    return client_settings.api_url()


def _cluster(cluster: str | None) -> str:
    return client_settings.cluster(cluster)


def _read_headers() -> dict[str, str]:
    """The API's bearer token, when RELAUNCH_API_TOKEN_FILE names a readable file (.run/env sets it):
    where the API has a token configured, it quotes a job's log lines (evidence) only to requests
    that carry it (docs/security.md, "Who sees what"). Without one, reads work and the API says
    where it left the excerpts out."""
    path = os.environ.get("RELAUNCH_API_TOKEN_FILE", "")
    try:
        token = Path(path).read_text().strip() if path else ""
    except OSError:
        token = ""
    return {"Authorization": f"Bearer {token}"} if token else {}


def _get(path: str, params: dict | None = None) -> dict:
    url = _api() + path
    try:
        resp = httpx.get(url, params=params, timeout=10, headers=_read_headers())
    except httpx.HTTPError as exc:
        err.print(f"[red]cannot reach the relaunch API at {shown(_api())}[/red]: {shown(exc)}\n"
                  "Is the stack up (make up) and RELAUNCH_API_URL set (source .run/env)?")
        raise typer.Exit(EXIT_UNREACHABLE) from exc
    if resp.status_code == 404:
        err.print(f"[yellow]{shown(resp.json().get('detail', 'not found'))}[/yellow]")
        raise typer.Exit(EXIT_NOT_FOUND)
    if resp.status_code >= 400:
        err.print(f"[red]the API answered {resp.status_code}[/red]: {shown(resp.text[:2000])}")
        raise typer.Exit(EXIT_UNREACHABLE if resp.status_code >= 500 else EXIT_USAGE)
    return resp.json()


@jobs_app.callback(invoke_without_command=True)
def jobs(ctx: typer.Context, cluster: str = typer.Option(None, help="Only this cluster."),
         limit: int = typer.Option(50, min=1, max=1000), as_json: bool = typer.Option(False, "--json")) -> None:
    """List the jobs relaunch tracks, newest activity first."""
    if ctx.invoked_subcommand is not None:
        return
    data = _get("/v1/jobs", {"limit": limit, **({"cluster": cluster} if cluster else {})})
    if as_json:
        print(json.dumps(data["jobs"], indent=2))
        return
    # One line per job in 80 columns: the outcome in words (relaunch.common.outcome_words, computed by
    # the API) wraps inside its column, never cut mid-sentence; names are cut with an ellipsis.
    clusters = {job["cluster"] for job in data["jobs"]}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    if len(clusters) > 1:
        table.add_column("cluster", no_wrap=True, max_width=10, overflow="ellipsis")
    table.add_column("job", no_wrap=True)
    table.add_column("name", no_wrap=True, max_width=16, overflow="ellipsis")
    table.add_column("outcome", overflow="fold", ratio=1)
    for job in data["jobs"]:
        # Every cell is text from the ledger: shown (no markup, control characters escaped).
        cells = [shown(job["cluster"])] if len(clusters) > 1 else []
        table.add_row(*cells, shown(job["job_id"]), shown(job["name"]), shown(job.get("outcome") or outcome(job)))
    console.print(table, width=min(console.width, 80))


@jobs_app.command("show")
def jobs_show(job_id: str, cluster: str = typer.Option(None, help="Cluster name (default: $RELAUNCH_CLUSTER)."),
              as_json: bool = typer.Option(False, "--json", help="One JSON object: job, attempts, anomalies, "
                                                               "advice, audit, goodput.")) -> None:
    """Show one job from the ledger: its attempts, anomalies, advice and audit trail."""
    data = _get(f"/v1/jobs/{_cluster(cluster)}/{job_id}")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    _print_job(data)


def _mode(job: dict) -> str:
    """The mode in force: an operator's observe beats the comment; act takes it back but never makes
    a job with invalid options act (docs/operator-guide.md)."""
    opted, override = job.get("mode") or "act", job.get("mode_override")
    if override is None:
        return opted
    effective = "observe" if "observe" in (opted, override) else "act"
    return f"{effective} (operator override {override}; the comment says {opted})"


def _print_job(data: dict) -> None:
    """The text form of `relaunch jobs show`. Everything in `data` comes from a job or the ledger and
    is untrusted (names, comments, log lines, paths, reasons): each value goes through `shown`, so
    no escape sequence reaches the terminal and no bracket is read as markup."""
    job = data["job"]
    sentence = job.get("outcome") or outcome(job, data.get("anomalies") or [])
    console.print(f"[bold]job {shown(job['job_id'])}[/bold] on {shown(job['cluster'])}: {shown(job['name'])}: "
                  f"{shown(sentence)}", highlight=False, soft_wrap=True)
    console.print(f"  state={shown(job['state'])}  verdict={shown(job['verdict'])}  mode={shown(_mode(job))}",
                  highlight=False, soft_wrap=True)
    if job["verdict_reason"]:
        console.print(f"  why: {shown(job['verdict_reason'])}", highlight=False)
    for line in goodput_lines(data.get("goodput")):  # (numbers and words the API computed; steps from the job)
        console.print(f"  {shown(line)}", highlight=False, soft_wrap=True)
    for a in data["attempts"]:
        exit_note = "" if a["exit_code"] is None else f" exit {shown(a['exit_code'])}"
        console.print(f"  attempt {shown(a['index'])}: {shown(a['state'])} on {shown(','.join(a['nodes']) or '-')}"
                      f"{exit_note}", highlight=False)
    for an in data["anomalies"]:
        console.print(f"  anomaly (attempt {shown(an['attempt'])}): {shown(an['category'])} "
                      f"({shown(an['fault_domain'])} fault, action {shown(an['action'])}): {shown(an['summary'])}",
                      highlight=False)
        if an.get("evidence_withheld"):
            console.print(f"      (evidence withheld: {shown(an['evidence_withheld'])})", highlight=False)
        for ev in an["evidence"]:
            console.print(f"      {shown(ev['path'])}@{shown(ev['offset'])}: {shown(ev['text'][:160])}",
                          highlight=False)
    for h in data.get("hang_evidence") or []:
        nodes = ",".join(h.get("suspect_nodes") or []) or "-"
        console.print(f"  hang evidence (attempt {shown(h['attempt'])}): {shown(h['status'])}, blame "
                      f"{shown(h['blame'])}, suspect nodes {shown(nodes)}, in {shown(h['elapsed_s'])} s: "
                      f"{shown(h['reason'] or h['detail'])}", highlight=False, soft_wrap=True)
        for r in h.get("ranks") or []:
            where = r.get("collective") or r.get("call") or r["where"]
            console.print(f"      rank {shown(r['rank'])} on {shown(r['node'])}: {shown(r['role'])}, "
                          f"{shown(where)} at {shown(r.get('place') or '-')} (state {shown(r['state'] or '?')})",
                          highlight=False, soft_wrap=True)
            for frame in (r.get("frames") or [])[:6]:
                console.print(f"          {shown(frame[:160])}", highlight=False)
    for ad in data["advice"]:
        # What was really left out, in words (the API reads the actuator's steps: a node the job
        # requires is kept); an older API gives only the nodes asked for.
        what = ad.get("exclusion_words") or (f"{ad['operation']} without {', '.join(ad['exclude_nodes'])}"
                                             if ad["exclude_nodes"] else ad["operation"])
        console.print(f"  advice gen {shown(ad['generation'])}: {shown(what)} → {shown(ad['status'])} "
                      f"{shown(ad['status_reason'])}", highlight=False, soft_wrap=True)
        if ad.get("reason"):
            console.print(f"      why: {shown(ad['reason'])}", highlight=False, soft_wrap=True)
        # The API says each fault once ("..., seen 6x 05:45:34-05:46:24": relaunch.common.repeats).
        for suspect in (ad.get("evidence") or {}).get("suspects", []):
            for reason in suspect["reasons"] or ["(no reason recorded)"]:
                console.print(f"      evidence {shown(suspect['node'])} ({suspect['confidence']:.2f}): {shown(reason)}",
                              highlight=False, soft_wrap=True)
        for step in ad.get("reconcile", []):
            console.print(f"      {shown(step['at'][11:23])} {shown(step['status']):<9} "
                          f"{shown(step['step'] or step['reason'])}", highlight=False)
    if data.get("audit"):
        # Every service's entries, in order; in observe mode these include the Slurm commands the
        # actuator would have run (details hold brackets: node lists, argv; shown keeps them literal).
        console.print("  audit:")
        for entry in data["audit"]:
            console.print(f"      {shown(entry['at'][11:23])} {shown(entry['service']):<9} {shown(entry['action'])}: "
                          f"{shown(entry['detail'])}", highlight=False)


@policy_app.command("check")
def policy_check(comment: str,
                 policy_file: Path = typer.Option(None, "--policy-file", envvar="RELAUNCH_DECIDER_POLICY_FILE",
                                                  help="The operator's policy file (default: the decider's "
                                                       "built-in policies)."),
                 as_json: bool = typer.Option(False, "--json", help="One JSON object: opted_in, mode, policy, "
                                                                  "errors, effective.")) -> None:
    """Diagnose a job comment as the decider would: the errors (the same words the audit entry gets)
    and the effective policy. Exit 0 valid, 2 invalid (the job would only be observed), 1 not opted in."""
    optin = parse_comment(comment)
    if not optin.opted_in:
        if as_json:
            print(json.dumps({"opted_in": False}))
        else:
            console.print("not opted in: the comment has no 'relaunch' token")
        raise typer.Exit(EXIT_NOT_FOUND)
    # Imported here: only this command needs the policy file's schema. The decider resolves with the same code.
    from relaunch.common.policies.policy_file import load_policies
    from relaunch.common.policies.policy_set import PolicyFileError, resolve

    try:
        policies = load_policies(policy_file)
    except PolicyFileError as exc:
        err.print(f"[red]cannot use the policy file[/red]: {shown(str(exc))}", soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from exc
    policy = resolve(optin, policies)
    errors, effective, source = list(policy.option_errors), policy.as_dict(), policies.source
    mode = "observe-only" if errors else "act"
    if as_json:
        print(json.dumps({"opted_in": True, "grammar": GRAMMAR_VERSION, "mode": mode, "errors": errors,
                          "policy_file": source, "effective": effective}))
    else:
        for error in errors:
            console.print(f"[red]error[/red]: {shown(error)}", soft_wrap=True, highlight=False)
        console.print(f"mode: {mode}")
        console.print(f"policies from: {shown(source)}", soft_wrap=True)
        console.print(f"effective policy: {shown(json.dumps(effective))}", soft_wrap=True, highlight=False)
    if errors:
        raise typer.Exit(EXIT_USAGE)


@events_app.command("tail")
def events_tail(subject: str = typer.Option("", help="NATS subject filter (default: events, Advice, job "
                                                       "observations and node health: what the shared cli user "
                                                       "may follow)."),
                as_json: bool = typer.Option(False, "--json", help="Print each message body as JSON.")) -> None:
    """Follow relaunch messages live until interrupted."""
    url = client_settings.nats_url()

    async def run() -> None:
        async for subj, msg in subscribe(url, subject or EVENTS_AND_ADVICE):
            if as_json:
                print(dump(msg).decode(), flush=True)
            else:
                # Piped (not a terminal): one line per message, never wrapped at 80 columns.
                console.print(f"[dim]{shown(subj)}[/dim] {type(msg).__name__} "
                              f"{shown(msg.model_dump_json(exclude={'schema_'})[:300])}", highlight=False,
                              soft_wrap=not console.is_terminal)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        err.print(f"[red]cannot reach NATS at {url}[/red]: {exc}")
        raise typer.Exit(EXIT_UNREACHABLE) from exc


@app.command("classify")
def classify(files: list[str] = typer.Argument(..., help="Log files to classify; - reads standard input."),
             as_json: bool = typer.Option(False, "--json", help="One JSON object per file per line."),
             signatures: list[Path] = typer.Option([], "--signatures", help="An operator signature file "
                                                   "(TOML, tried before the built-in ones); repeatable."),
             engine: str = typer.Option("auto", "--engine", help=classify_command.ENGINE_HELP)) -> None:
    """Say what went wrong in training logs, offline (no server): the root cause, its fault domain and
    what relaunch would do. Exit 2 when a file cannot be read."""
    code = classify_command.run(files, as_json, [str(path) for path in signatures], engine)
    if code:
        raise typer.Exit(code)


@app.command("progress")
def progress(files: list[str] = typer.Argument(..., help="Log files to read; - reads standard input."),
             as_json: bool = typer.Option(False, "--json", help="One JSON object per file per line.")) -> None:
    """Show the training progress relaunch reads from logs, offline (no server), the way its live log
    follower reads them: the formats recognised, the steps, step time, throughput and the hang timeout
    the job's rhythm gives. Exit 2 when a file cannot be read."""
    from relaunch.common.progress.reading import summarize

    unreadable = []
    for name in files:
        try:
            if name == "-":
                found = summarize(name, classify_command._stdin_bytes())
            else:
                with open(name, "rb") as stream:
                    found = summarize(name, stream)
        except OSError as exc:
            unreadable.append(name)
            err.print(f"[red]cannot read {shown(name)}[/red]: {shown(exc.strerror or str(exc))}", soft_wrap=True)
            continue
        if as_json:
            print(json.dumps(found.as_json()), flush=True)
        else:
            _print_progress(found)
    if unreadable:
        raise typer.Exit(EXIT_USAGE)


def _print_progress(found) -> None:
    """Log text is untrusted: everything taken from it is escaped for rich's markup."""
    data = found.as_json()
    console.print(f"[bold]{shown(found.file)}[/bold]: " + (
        f"{data['steps']} step(s) ({data['first_step']} .. {data['last_step']}) in "
        f"{shown(', '.join(data['formats']))} format" if data["steps"] else "no training step recognised"),
        soft_wrap=True)
    if data["step_time_s"] is not None:
        console.print(f"  step time {data['step_time_s']:.3g} s", soft_wrap=True)
    if data["throughput"] is not None:
        console.print(f"  throughput {data['throughput']:.4g} (in the format's own unit)", soft_wrap=True)
    if data["hang_timeout_s"] is not None:
        console.print(f"  hang declared after {data['hang_timeout_s']:.3g} s without a new step", soft_wrap=True)
    if found.loss_reports:
        console.print(f"  {found.loss_reports} loss report(s) read for divergence", soft_wrap=True)
    if found.divergence is not None:
        console.print(f"  [red]divergence[/red] ({found.divergence.signature_id}): {shown(found.divergence.reason)}",
                  soft_wrap=True)
    for note in found.notes:
        console.print(f"  [yellow]note[/yellow]: {shown(note)}", soft_wrap=True)


@app.command("demo")
def demo(script: Path = typer.Option(Path("examples/flaky-train.sh"), help="The job to submit."),
         timeout: float = typer.Option(60.0, help="Give up after this many seconds.")) -> None:
    """Submit a job that crashes once and narrate, in plain words, how relaunch recovers it."""
    url = client_settings.nats_url()
    jobs_dir = Path(os.environ.get("RELAUNCH_RUN_DIR", ".run")) / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    if not script.exists():
        err.print(f"[red]{script} does not exist[/red]")
        raise typer.Exit(EXIT_USAGE)

    async def run() -> int:
        async with EventStream(url) as stream:
            out = subprocess.run(["sbatch", "--parsable", "-o", str(jobs_dir.resolve() / "%x-%j.out"), str(script)],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                err.print(f"[red]sbatch failed[/red]: {out.stderr.strip()} (is SLURM_CONF set? source .run/env)")
                return EXIT_UNREACHABLE
            job_id = out.stdout.strip().split(";")[0]
            log_path = jobs_dir / f"flaky-train-{job_id}.out"
            t0 = time.monotonic()
            console.print(f"[bold]Submitted job {job_id}[/bold] ({script.name}): a toy training run that crashes "
                          "on its first attempt. It opts in with --comment=relaunch:max_attempts=2.")
            states: dict[str, str] = {}
            while True:
                remaining = timeout - (time.monotonic() - t0)
                if remaining <= 0:
                    err.print(f"[red]no outcome within {timeout:.0f}s[/red]; see relaunch jobs show {job_id}")
                    return EXIT_NOT_FOUND
                try:
                    _, msg = await stream.next(timeout=remaining)
                except TimeoutError:
                    continue
                if getattr(msg, "job_id", None) != job_id:
                    continue
                line = describe(msg, states)
                if line:
                    # A narration may span lines (its evidence): each line shown on its own.
                    text = "\n".join(shown(part) for part in line.split("\n"))
                    console.print(f"[dim]+{time.monotonic() - t0:5.1f}s[/dim] {text}", highlight=False)
                if getattr(msg, "state", "") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") and (
                        msg.state == "COMPLETED" or msg.restarts >= 1):
                    break
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            took = recovery_seconds(text)
            console.print(f"[bold]Outcome:[/bold] job {job_id} ran {msg.restarts + 1} times and ended {msg.state}.")
            if took is not None:
                console.print(f"Time from the failure line to the job running again: [bold]{took:.1f} s[/bold] "
                              "(Slurm's own requeue waits 120 s).")
            console.print(f"The whole story is in the ledger: relaunch jobs show {job_id}")
            return 0 if msg.state == "COMPLETED" else 1

    raise typer.Exit(asyncio.run(run()))


unwrap_help(app)  # every command is registered by now: sentences are not broken mid-line in --help


def main() -> None:
    from relaunch.common.settings import NotSet

    try:
        app()
    except BrokenPipeError:
        sys.exit(0)
    except NotSet as exc:  # a backend URL the command needs: say which and how, no traceback
        err.print(f"[red]error[/red]: {shown(str(exc))}", soft_wrap=True, highlight=False)
        sys.exit(EXIT_USAGE)
