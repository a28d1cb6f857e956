"""The console in two languages (issue 25, docs/glossary.md): the catalogs are complete (every msgid of the
project has a Simplified Chinese translation, en and zh_Hans hold the same msgids) and fresh (makemessages run
now finds exactly the committed msgids), every text of templates/ is marked, the admin and the storefront speak
the language picked, and the API answers machines the same whatever Accept-Language says."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from .conftest import ROOT

LOCALE = ROOT / "locale"
DOMAINS = ("django", "djangojs")
LANGUAGES = ("en", "zh_Hans")
TEMPLATES = ROOT / "templates"
# What makemessages reads: the project's code, templates and static files (Makefile, MESSAGES_ARGS).
SOURCES = ("campaigns", "config", "core", "coupons", "orders", "grants", "storefronts", "storefront", "webhooks",
           "templates", "static")
NO_GETTEXT = "xgettext is missing: apt-get install -y gettext (.ci/run does)"

Key = tuple[str | None, str, str | None]  # (msgctxt, msgid, msgid_plural)


def read_po(path: Path) -> dict[Key, dict[str, object]]:
    """The entries of a .po file: (msgctxt, msgid, msgid_plural) -> {"msgstr": [str, ...], "fuzzy": bool}.
    The header (msgid "") is left out. Enough of the format for what makemessages writes."""
    entries: dict[Key, dict[str, object]] = {}
    current: dict[str, object] = {}
    field = ""

    def flush() -> None:
        if "msgid" in current and current["msgid"] != "":
            key = (current.get("msgctxt"), current["msgid"], current.get("msgid_plural"))
            entries[key] = {"msgstr": current.get("msgstr", []), "fuzzy": current.get("fuzzy", False)}  # type: ignore[index]
        current.clear()

    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        line = line.strip()
        if line.startswith("#,") and "fuzzy" in line:
            if "msgstr" in current:
                flush()
            current["fuzzy"] = True
            continue
        if not line or line.startswith("#"):
            if not line and current.get("msgstr"):
                flush()
            continue
        match = re.match(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(".*")$', line)
        if match:
            name, text = match.group(1), ast.literal_eval(match.group(2))
            if name in ("msgctxt", "msgid") and "msgstr" in current:
                flush()
            if name.startswith("msgstr"):
                current.setdefault("msgstr", []).append(text)  # type: ignore[union-attr]
                field = "msgstr"
            else:
                current[name] = text
                field = name
        elif line.startswith('"'):
            text = ast.literal_eval(line)
            if field == "msgstr":
                strings = current["msgstr"]
                strings[-1] += text  # type: ignore[index]
            else:
                current[field] = str(current[field]) + text
    flush()
    return entries


def catalog(language: str, domain: str) -> dict[Key, dict[str, object]]:
    return read_po(LOCALE / language / "LC_MESSAGES" / f"{domain}.po")


def english_msgids() -> set[str]:
    """Every English text the project adds (for the browser tests: none may be left on a zh-hans page)."""
    texts: set[str] = set()
    for domain in DOMAINS:
        for _context, msgid, plural in catalog("zh_Hans", domain):
            texts.add(msgid)
            if plural:
                texts.add(plural)
    return texts


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_msgid_has_a_simplified_chinese_translation(domain: str) -> None:
    entries = catalog("zh_Hans", domain)
    assert entries, f"locale/zh_Hans/LC_MESSAGES/{domain}.po has no entries"
    untranslated = [key for key, entry in entries.items() if not all(entry["msgstr"]) or not entry["msgstr"]]
    fuzzy = [key for key, entry in entries.items() if entry["fuzzy"]]
    assert not untranslated, f"msgids without a zh_Hans translation in {domain}.po: {untranslated}"
    assert not fuzzy, f"fuzzy (unchecked) zh_Hans translations in {domain}.po: {fuzzy}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_translations_keep_the_placeholders(domain: str) -> None:
    placeholder = re.compile(r"%\(\w+\)s|%%")
    for (_context, msgid, _plural), entry in catalog("zh_Hans", domain).items():
        for text in entry["msgstr"]:  # type: ignore[attr-defined]
            assert sorted(placeholder.findall(text)) == sorted(placeholder.findall(msgid)), (msgid, text)


@pytest.mark.parametrize("domain", DOMAINS)
def test_english_and_chinese_catalogs_hold_the_same_msgids(domain: str) -> None:
    assert set(catalog("en", domain)) == set(catalog("zh_Hans", domain))


@pytest.fixture(scope="module")
def fresh_catalogs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """makemessages run now, on a copy of the sources (so the committed catalogs are not touched)."""
    if shutil.which("xgettext") is None:
        pytest.skip(NO_GETTEXT)
    work = tmp_path_factory.mktemp("messages")
    for name in SOURCES:
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    shutil.copy(ROOT / "manage.py", work / "manage.py")
    (work / "locale").mkdir()
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.base", "PYTHONPATH": str(work)}
    for domain in DOMAINS:
        subprocess.run(
            [sys.executable, "manage.py", "makemessages", "-d", domain, "-l", "zh_Hans", "--no-location",
             "-v", "0"],
            cwd=work, env=env, check=True, capture_output=True,
        )
    return work / "locale"


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_committed_catalogs_are_not_stale(fresh_catalogs: Path, domain: str) -> None:
    fresh = set(read_po(fresh_catalogs / "zh_Hans" / "LC_MESSAGES" / f"{domain}.po"))
    committed = set(catalog("zh_Hans", domain))
    assert fresh - committed == set(), f"marked but not in the catalog (run `make messages`): {fresh - committed}"
    assert committed - fresh == set(), f"in the catalog but no longer marked (run `make messages`): {committed - fresh}"


# --- every text of the templates is marked ---------------------------------------------------------------------

BLOCKS = [
    re.compile(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}", re.S),
    re.compile(r"{#.*?#}", re.S),
    re.compile(r"{%\s*blocktranslate\b.*?{%\s*endblocktranslate\s*%}", re.S),
    re.compile(r"<(script|style)\b.*?</\1>", re.S),
    re.compile(r"{%.*?%}", re.S),
    re.compile(r"{{.*?}}", re.S),
]
# Attributes people read; their values must be marked like text (what is left once tags are removed).
READ_ATTRIBUTES = re.compile(r"""\b(placeholder|title|alt|aria-label)\s*=\s*("[^"]*"|'[^']*')""")
SUBMIT_VALUE = re.compile(r"""<input\b[^>]*type="submit"[^>]*value=("[^"]*")""")
TAG = re.compile(r"<[^>]*>", re.S)
ENTITY = re.compile(r"&[a-z]+;|&#\d+;")
NOT_WORDS = {"couponrush"}  # the product's name is the same in every language


def unmarked_texts(source: str) -> list[str]:
    text = source
    for block in BLOCKS[:4]:
        text = block.sub(" ", text)
    for block in BLOCKS[4:]:
        text = block.sub(" ", text)
    attributes = [m.group(2)[1:-1] for m in READ_ATTRIBUTES.finditer(text)]
    attributes += [m.group(1)[1:-1] for m in SUBMIT_VALUE.finditer(text)]
    left = []
    for piece in [*TAG.sub("\n", text).split("\n"), *attributes]:
        piece = ENTITY.sub(" ", piece)
        words = [w for w in re.findall(r"[^\W\d_]+", piece) if w not in NOT_WORDS]
        if words:
            left.append(piece.strip())
    return left


@pytest.mark.parametrize("path", sorted(TEMPLATES.rglob("*.html")), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_every_text_of_a_template_is_marked_for_translation(path: Path) -> None:
    assert unmarked_texts(path.read_text()) == []


def test_the_template_check_finds_an_unmarked_text() -> None:
    assert unmarked_texts("<p>Hello {{ name }}</p>") == ["Hello"]
    assert unmarked_texts('<input type="submit" value="Go">') == ["Go"]
    assert unmarked_texts('<input placeholder="e.g. SAVE50">') == ["e.g. SAVE50"]
    assert unmarked_texts('<p>{% translate "Hello" %} · {{ n }} &rsaquo; 42</p>') == []
    assert unmarked_texts("{% blocktranslate %}Hi {{ n }}{% endblocktranslate %}{# note #}") == []


def test_the_template_check_passes_no_english_msgid_through_its_allowances() -> None:
    assert not NOT_WORDS & english_msgids()


# --- the console speaks the language picked; the API does not ------------------------------------------------


def test_the_admin_login_page_speaks_chinese_when_the_browser_asks(client: Client, db: object) -> None:
    page = client.get("/admin/login/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "couponrush 运营后台" in page and 'lang="zh-hans"' in page
    assert 'id="language-switch"' in page and 'action="/i18n/setlang/"' in page
    english = client.get("/admin/login/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "couponrush operators" in english


def test_the_language_switch_keeps_the_choice(client: Client, db: object) -> None:
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "我的优惠券" in page and "My coupons" not in page


def test_the_storefront_loads_its_strings_from_the_javascript_catalog(client: Client, db: object) -> None:
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<script src="/i18n/js/"' in page
    script = client.get("/i18n/js/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "\\u62a2\\u5238" in script or "抢券" in script  # "Grab" -> 抢券


@pytest.mark.parametrize("path", ["/api/v1/campaigns/987654", "/api/v1/campaigns/abc", "/api/v1/me/coupons",
                                  "/api/v1/nowhere"])
def test_the_api_answers_the_same_whatever_the_accept_language(client: Client, db: object, path: str) -> None:
    """code and status never change; detail stays English too (docs/api.md, Languages): DRF's own messages,
    which LocaleMiddleware would translate, included."""
    english = client.get(path, HTTP_ACCEPT_LANGUAGE="en")
    chinese = client.get(path, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert english.status_code == chinese.status_code >= 400
    assert english.json() == chinese.json()
    assert {"code", "status"} <= set(chinese.json())
    assert "Content-Language" not in chinese and "Accept-Language" not in chinese.get("Vary", "")


# --- the management commands speak the operator's language too --------------------------------------------------

PROJECT_APPS = ("campaigns", "coupons", "orders", "grants", "storefronts", "webhooks")


def project_commands() -> list[str]:
    from django.core.management import get_commands

    return sorted(name for name, app in get_commands().items() if app in PROJECT_APPS)


def command_helps(name: str) -> list[str]:
    """A command's help and its own arguments' help (not Django's --verbosity, --settings ...), as shown now."""
    from django.core.management import get_commands, load_command_class
    from django.core.management.base import BaseCommand, CommandParser

    command = load_command_class(get_commands()[name], name)
    parser = command.create_parser("manage.py", name)
    django_own = {a.dest for a in BaseCommand().create_parser("manage.py", "x")._actions}
    ours = [a.help for a in parser._actions if a.dest not in django_own]
    assert all(isinstance(text, str) and text for text in ours), f"{name}: an argument without help"
    assert isinstance(parser, CommandParser) and parser.description
    return [parser.description, *ours]


def test_every_project_command_is_found() -> None:
    assert {"campaign_create", "codes_generate", "verify_campaign", "webhook_add"} <= set(project_commands())
    assert len(project_commands()) == len(list(ROOT.glob("*/management/commands/[a-z]*.py")))


@pytest.mark.parametrize("name", project_commands())
def test_every_management_command_help_is_translated(name: str) -> None:
    """The help of each command and of each of its arguments is marked (gettext_lazy / gettext) and has a
    Simplified Chinese translation: shown under zh-hans, no text is the English one (core/commands.py)."""
    from django.core.management import get_commands, load_command_class
    from django.utils import translation
    from django.utils.functional import Promise

    assert isinstance(load_command_class(get_commands()[name], name).help, Promise), f"{name}: help not marked"
    with translation.override("en"):
        english = command_helps(name)
    with translation.override("zh-hans"):
        chinese = command_helps(name)
    assert len(english) == len(chinese)
    untranslated = [text for text, shown in zip(english, chinese, strict=True) if text == shown]
    assert untranslated == [], f"{name}: help shown in English under zh-hans: {untranslated}"


def test_a_command_prints_for_operators_in_the_language_active(db: object) -> None:
    """manage.py runs in settings.LANGUAGE_CODE (DJANGO_LANGUAGE_CODE): its lines for operators follow it,
    while what machines read (JSON lines, the CSV's header) stays as the contract says."""
    from io import StringIO

    from django.core.management import call_command
    from django.utils import translation

    out = StringIO()
    with translation.override("zh-hans"):
        call_command("replay_events", "--check", stdout=out)
    assert out.getvalue().strip() == "已检查 0 张优惠券，0 张与其事件不一致"


def test_a_refusal_an_operator_reads_is_in_the_language_active(db: object) -> None:
    from django.core.exceptions import ValidationError
    from django.utils import translation

    from .factories import CampaignFactory

    campaign = CampaignFactory.build(currency="XYZ")
    for language, text in (("zh-hans", "未知币种"), ("en", "Unknown currency")):
        with translation.override(language), pytest.raises(ValidationError) as refused:
            campaign.clean()
        assert text in refused.value.message_dict["currency"][0]


def test_a_forms_help_text_formatted_with_a_figure_is_in_the_requests_language() -> None:
    # formatted at import, a lazy string is English for good (the restock form's help text was)
    from django.utils import translation

    from campaigns.admin import RestockForm

    with translation.override("zh-hans"):
        assert RestockForm().fields["quantity"].help_text == "1 到 1,000,000：同时计入总库存和实时库存。"
    with translation.override("en"):
        assert RestockForm().fields["quantity"].help_text.startswith("1 to 1,000,000: added to the total")
