"""Reference pages generated from the code: settings, Prometheus metrics, Redis keys.

Each directive reads the package itself (the settings registry, the validation messages
its config classes raise, the metric definitions, ``KeySpace``), so a
page cannot describe a setting, metric or key the code does not have, nor leave one out:
a mismatch fails the build (``sphinx-build -W``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: Examples for the settings whose default (None, or a bare default) shows no use.
SETTING_EXAMPLES: dict[str, Any] = {
    "delayq_metrics_port": 9808,
    "delayq_metrics_addr": "0.0.0.0",
    "delayq_store_url": "redis://redis-schedule.internal:6379/0",
    "delayq_store_master_name": "mymaster",
    "delayq_web_username": "admin",
    "delayq_web_password": "a-long-random-password",
    "delayq_web_token": "a-long-random-token",
    "delayq_web_secret_key": "a-long-random-secret",
    "delayq_web_secure_cookies": True,
    "delayq_web_allowed_hosts": ["delayq.example.internal"],
    "delayq_rate_limits": {
        "proj.tasks.call_partner_api": "10/s",
        "proj.tasks.send_sms": ["5/s", "100000/d"],
    },
    "delayq_concurrency_limits": {"proj.tasks.render_video": 4},
}


def rst_literal(value: Any) -> str:
    return f"``{value!r}``"


def code_block(language: str, source: str) -> list[str]:
    return [f".. code-block:: {language}", "", *textwrap.indent(source, "   ").splitlines(), ""]


def heading(title: str, char: str) -> list[str]:
    return [title, char * len(title), ""]


@dataclasses.dataclass
class Setting:
    """One setting as the reference shows it."""

    name: str
    type: str
    default: Any
    doc: str
    owner: type | None  # the dataclass that validates it, when there is one
    field: str = ""
    env: str | None = None
    validation: str = ""

    def example(self) -> Any:
        example = SETTING_EXAMPLES.get(self.name, self.default)
        if example is None:
            raise ValueError(f"no example for {self.name}: add one to SETTING_EXAMPLES")
        if self.owner is not None:
            self.owner(**{self.field: example})  # every example shown is a valid value
        return example

    def lines(self) -> list[str]:
        example = self.example()
        validation = self.validation or validation_of(self.owner, self.field, self.name)
        lines = [*heading(self.name, "-"), self.doc, ""]
        lines += [f":Type: ``{self.type}``", f":Default: {rst_literal(self.default)}"]
        lines += [f":Validation: {validation}"]
        if self.env:
            lines += [f":Environment: ``{self.env}``, which wins over the setting"]
        lines += [
            "",
            "Example, in a Celery configuration:",
            "",
            *code_block("python", f"{self.name} = {example!r}"),
            "In Django's settings (``app.config_from_object('django.conf:settings', "
            "namespace='CELERY')``):",
            "",
            *code_block("python", f"CELERY_{self.name.upper()} = {example!r}"),
        ]
        return lines


def validation_of(cls: type | None, field: str, name: str) -> str:
    """What ``cls`` refuses for ``field``, in its own words: the message it raises for a
    value of no sensible type, without the value."""
    if cls is None:
        return "not checked when read (see above)"
    from celery_delayq.config.errors import ConfigurationError

    try:
        cls(**{field: object()})
    except (ConfigurationError, TypeError, ValueError) as exc:
        message = str(exc)
    else:
        return "not checked when read (see above)"
    return message.split(", got ", 1)[0].replace(f"{name} ", "", 1)


def type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).replace("typing.", "")


def settings() -> list[Setting]:
    """Every setting, from the one registry ``SETTINGS`` (name -> dataclass field, its doc
    in ``metadata["doc"]``, its rule in ``metadata["valid"]``, its variable in ``"env"``)."""
    from celery_delayq.config.catalog import SETTINGS
    from celery_delayq.config.dashboard import WebConfig
    from celery_delayq.config.settings import DelayqConfig

    owners = (DelayqConfig, WebConfig)
    found = []
    for name, field in SETTINGS.items():
        owner = next(c for c in owners if any(f is field for f in dataclasses.fields(c)))
        doc = field.metadata.get("doc")
        if not doc:
            raise ValueError(f"setting {name} has no doc")
        found.append(
            Setting(
                name,
                type_name(field.type),
                field.default,
                doc,
                owner,
                field.name,
                env=field.metadata.get("env"),
                validation=field.metadata.get("valid", ""),
            )
        )
    return found


class GeneratedDirective(SphinxDirective):
    """A directive whose content is reStructuredText made from the code."""

    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        source = StringList(self.lines(), source=self.get_source_info()[0])
        nested_parse_with_titles(self.state, source, container)
        return container.children


class SettingsDirective(GeneratedDirective):
    def lines(self) -> list[str]:
        every = settings()
        web = [one for one in every if one.name.startswith("delayq_web_")]
        out = heading("Worker, beat and mover settings", "=")
        out += ["Read from the Celery app's configuration by every process that uses it.", ""]
        for one in every:
            if one not in web:
                out += one.lines()
        out += heading("Web dashboard settings", "=")
        out += ["Read by the dashboard (``celery delayq web``, ``create_app``).", ""]
        for one in web:
            out += one.lines()
        return out


@dataclasses.dataclass
class Metric:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...]

    @property
    def samples(self) -> list[str]:
        """The names Prometheus scrapes (prometheus_client's suffixes by type)."""
        if self.kind == "counter":
            return [f"{self.name}_total"]
        if self.kind == "histogram":
            return [f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count"]
        return [self.name]


def metrics() -> list[Metric]:
    """Every metric family the collector can yield: the GAUGES, COUNTERS and FLOW_GAUGES
    tables, and each ``*MetricFamily("celery_delayq_...", ...)`` call written out in the
    module."""
    import celery_delayq.metrics as module

    found = [Metric(name, "gauge", doc, ("queue",)) for name, doc, _ in module.GAUGES]
    found += [Metric(name, "counter", doc, ("queue",)) for name, doc, _ in module.COUNTERS]
    found += [Metric(n, "gauge", doc, ("queue", "task")) for n, doc, _ in module.FLOW_GAUGES]
    tree = ast.parse(inspect.getsource(module))
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            found += _families_in(function)
    return found


def _families_in(function: ast.FunctionDef) -> list[Metric]:
    assigned = {
        target.id: node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for call in ast.walk(function):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        kind = re.fullmatch(r"(Gauge|Counter|Histogram)MetricFamily", call.func.id)
        if not kind or not call.args or not isinstance(call.args[0], ast.Constant):
            continue  # the tables' families, named by a loop variable
        labels: ast.expr | None = next((k.value for k in call.keywords if k.arg == "labels"), None)
        if isinstance(labels, ast.Name):
            labels = assigned.get(labels.id)
        label_names = ast.literal_eval(labels) if labels is not None else ()
        doc = _text(call.args[1])
        found.append(Metric(call.args[0].value, kind[1].lower(), doc, tuple(label_names)))
    return found


def _text(node: ast.expr) -> str:
    """A help text as written: a constant, or an f-string with its fields shown as code."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append(f"<{ast.unparse(value.value).removeprefix('self.')}>")
        return "".join(parts)
    return ast.unparse(node)


class MetricsDirective(GeneratedDirective):
    def lines(self) -> list[str]:
        out: list[str] = []
        for metric in sorted(metrics(), key=lambda m: m.name):
            out += heading(metric.name, "-")
            help_text = metric.help.replace("`", "``")
            samples = ", ".join(f"``{s}``" for s in metric.samples)
            labels = ", ".join(f"``{label}``" for label in metric.labels) or "none"
            out += [
                help_text,
                "",
                f":Type: {metric.kind}",
                f":Labels: {labels}",
                f":Scraped as: {samples}",
                "",
            ]
        return out


#: One line of keys.py's layout table: key, type, then what it holds.
_LAYOUT_ROW = re.compile(r"^    (P:\S+)\s+(SET|HASH|PUBSUB|ZSET|STRING|LIST)\s+(.*)$")


def key_layout() -> list[tuple[str, str, str]]:
    """The layout table of keys.py's docstring, as (key, type, content) rows."""
    import celery_delayq.core.layout.keys as keys

    rows: list[list[str]] = []
    for line in (keys.__doc__ or "").splitlines():
        match = _LAYOUT_ROW.match(line)
        if match:
            rows.append(list(match.groups()))
        elif rows and line.startswith(" " * 20) and line.strip():
            rows[-1][2] += " " + line.strip()
    return [(key, kind, " ".join(text.split())) for key, kind, text in rows]


def keyspace_keys() -> set[str]:
    """Every key name ``KeySpace`` forms, with ``P`` as the prefix and ``Q`` as the queue."""
    from celery_delayq.core.layout.keys import KeySpace

    space = KeySpace(key_prefix="P")
    queue = space.for_queue("Q")
    names = {space.queues, space.movers, space.wakeup_channel, space.inspect_claim("Q", "<T>")}
    names |= {*queue.handover_keys(), *queue.move_keys(), queue.page("<n>")}
    names |= {space.periodic_entries, space.periodic_versions}
    names |= {space.periodic_runs, space.periodic_counts, space.periodic_changes("<name>")}
    names |= {queue.periodic_marks, queue.periodic_ahead, queue.periodic_gone}
    names |= {space.off_shard_queues, queue.by_task, queue.deliveries("<M>")}
    names |= {*queue.slot_keys("<B>"), queue.gate_log, queue.paused}
    names |= {*queue.slot_take_keys("<B>"), queue.gate_released}
    return names


class KeysDirective(GeneratedDirective):
    def lines(self) -> list[str]:
        rows = key_layout()
        documented = {key for key, _, _ in rows}
        formed = keyspace_keys()
        if documented != formed:
            raise ValueError(
                "keys.py's layout table and the keys KeySpace forms differ: "
                f"{sorted(documented ^ formed)}"
            )
        out = [".. list-table::", "   :header-rows: 1", "   :widths: 25 10 65", ""]
        out += ["   * - key", "     - type", "     - content"]
        for key, kind, text in rows:
            out += [f"   * - ``{key}``", f"     - {kind.lower()}", f"     - {_rst_text(text)}"]
        return [*out, ""]


def _rst_text(text: str) -> str:
    """keys.py's docstring text in reStructuredText: its ``code`` as it is, quotes kept."""
    return text.replace("\x04", r"\\x04").replace("*", "\\*")


class ApiDirective(GeneratedDirective):
    """autodoc of every name ``celery_delayq`` exports (its ``__all__``), in that order."""

    def lines(self) -> list[str]:
        import celery_delayq

        out: list[str] = []
        for name in celery_delayq.__all__:
            if name.startswith("__"):
                continue
            value = getattr(celery_delayq, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                kind = "autoexception"
            elif isinstance(value, type):
                kind = "autoclass"
            else:
                kind = "autofunction"
            out += heading(name, "-")
            out += [f".. {kind}:: celery_delayq.{name}", ""]
        return out


def add_raises(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Append ``:raises:`` for each exception the object's own code raises (found in its
    source), unless its docstring lists them already."""
    if what not in ("function", "method", "class") or any(":raises" in line for line in lines):
        return
    target = obj.__init__ if what == "class" else obj
    if not getattr(target, "__module__", "").startswith("celery_delayq"):
        return
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):
        return
    seen = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        func = node.exc.func
        exc = func.id if isinstance(func, ast.Name) else None
        if exc is None or exc in seen:
            continue
        seen.add(exc)
        why = _text(node.exc.args[0]) if node.exc.args else ""
        lines += ["", f":raises {exc}: {why}".rstrip()]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("delayq-settings", SettingsDirective)
    app.add_directive("delayq-metrics", MetricsDirective)
    app.add_directive("delayq-keys", KeysDirective)
    app.add_directive("delayq-api", ApiDirective)
    app.connect("autodoc-process-docstring", add_raises)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
