"""The serve page's rendering of nested entities (``ner --nested``) and of relation triples, in headless Chromium.

The page (``ernie_ft/serving/static/index.html``) is opened as a file and its own ``render`` is called with a
model's ``/v1/info`` and a ``predict`` record written here, so each case (an entity inside another, one span with
two types, a span that is the subject of one triple and the object of another) is there whatever a model learnt.
One rule colours the marks: the colour says an entity's type, and the legend lists the types present, each in the
colour its marks have (``legend_matches_marks``); a relation model's entity shows its role by its underline, with a
legend of the roles present.
"""

import re

import pytest
from conftest import ROOT

PAGE = (ROOT / "ernie_ft" / "serving" / "static" / "index.html").as_uri()


def rendered(browser, info: dict, prediction: dict):
    """The page's result element after ``render`` drew ``prediction`` for a model described by ``info``."""
    from selenium.webdriver.common.by import By

    browser.get(PAGE)  # no server: /v1/info fails, and the test gives the page its own
    browser.execute_script(
        "info = arguments[0]; const node = document.getElementById('result');"
        " render(node, arguments[1], {text: arguments[1].text}); node.hidden = false;",
        info,
        prediction,
    )
    return browser.find_element(By.ID, "result")


def marks(container) -> list[tuple]:
    from selenium.webdriver.common.by import By

    found = container.find_elements(By.CSS_SELECTOR, "mark[data-start]")
    return [
        (int(m.get_attribute("data-start")), int(m.get_attribute("data-end")), m.get_attribute("data-type"))
        for m in found
    ]


def roles(container) -> list[str]:
    """The roles of the marks in ``container``, in text order ("subject object": both)."""
    from selenium.webdriver.common.by import By

    return [m.get_attribute("data-role") for m in container.find_elements(By.CSS_SELECTOR, "mark[data-start]")]


def underline(element) -> tuple[str, str]:
    return element.value_of_css_property("border-bottom-style"), element.value_of_css_property("border-bottom-width")


def role_legend_matches_marks(result) -> None:
    """The role legend lists the roles the marks have, each underlined as its marks are, no two alike; the table's
    marks are underlined by their column's role."""
    from selenium.webdriver.common.by import By

    entries = result.find_elements(By.CSS_SELECTOR, "#roles span")
    legend = {e.get_attribute("data-role"): underline(e) for e in entries}
    assert len(set(legend.values())) == len(legend) == len(entries)
    assert all(style != "none" for style, _ in legend.values())
    shown = set()
    for mark in result.find_elements(By.TAG_NAME, "mark"):
        role = mark.get_attribute("data-role")
        assert role in legend and underline(mark) == legend[role], (mark.text, role)
        shown.add(role)
    assert shown == set(legend)
    for row in result.find_elements(By.CSS_SELECTOR, "#relations tr[data-predicate]"):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert [cells[k].find_element(By.TAG_NAME, "mark").get_attribute("data-role") for k in (1, 3)] == [
            "subject",
            "object",
        ]


RGB = re.compile(r"rgba?\(([^)]*)\)")


def painted(element) -> list[tuple]:
    """The colours ``element`` is painted with, from its computed style, as (r, g, b) or (r, g, b, a): its background
    colour (unless transparent) and the colours of its background image (a band per type), each once, left to
    right."""

    def rgb(css: str) -> list[tuple]:
        found = [tuple(float(x) for x in match.split(",")) for match in RGB.findall(css)]
        return [c[:3] if len(c) == 4 and c[3] == 1 else c for c in found]

    colours = rgb(element.value_of_css_property("background-image"))
    colour = rgb(element.value_of_css_property("background-color"))
    if colour and colour[0] != (0, 0, 0, 0):
        colours.insert(0, colour[0])
    return list(dict.fromkeys(colours))


def legend_matches_marks(browser, result) -> dict:
    """Check that the legend lists each type a mark has, once, in one colour of its own, that every mark is painted
    with the legend's colours of its types (from its subscript; none: the untyped entry), and that every legend
    colour is on some mark. Returns {type: colour} (the untyped entry under "")."""
    from selenium.webdriver.common.by import By

    entries = result.find_elements(By.CSS_SELECTOR, ".legend span")
    legend = {e.get_attribute("data-type"): painted(e) for e in entries}
    assert len(legend) == len(entries) and all(len(c) == 1 for c in legend.values()), legend
    colour = {t: c[0] for t, c in legend.items()}
    assert len(set(colour.values())) == len(colour), colour  # one colour per type
    used = set()
    for mark in result.find_elements(By.TAG_NAME, "mark"):
        sub = browser.execute_script("const s = arguments[0].querySelector('sub'); return s && s.textContent", mark)
        types = sub.split(" / ") if sub else [""]
        assert all(t in colour for t in types), (types, sorted(colour))
        assert painted(mark) == [colour[t] for t in types], (mark.text, types)
        used.update(painted(mark))
    assert used == set(colour.values())  # no legend entry without a mark
    return colour


def plain_text(browser) -> str:
    """The marked text with the type subscripts taken out."""
    return browser.execute_script(
        "const d = document.getElementById('doc').cloneNode(true);"
        " d.querySelectorAll('sub').forEach(s => s.remove()); return d.textContent;"
    )


def test_nested_entities_mark_the_outermost_and_list_the_rest(browser):
    from selenium.webdriver.common.by import By

    text = "儿童SARST细胞亚群伴头痛。"
    entities = [(0, 11, "bod"), (7, 9, "bod"), (12, 14, "sym"), (12, 14, "dis"), (13, 14, "bod")]
    prediction = {
        "text": text,
        "entities": [{"start": s, "end": e, "type": t, "text": text[s:e], "score": 0.9} for s, e, t in entities],
    }
    info = {"task": "ner", "labels": ["bod", "dis", "sym"]}
    result = rendered(browser, info, prediction)
    assert result.get_attribute("data-kind") == "entities"
    assert marks(browser.find_element(By.ID, "doc")) == [(0, 11, "bod"), (12, 14, "sym")]
    assert plain_text(browser) == text
    inside = browser.find_element(By.ID, "nested").find_elements(By.TAG_NAME, "li")
    listed = [
        (int(li.get_attribute("data-start")), int(li.get_attribute("data-end")), li.get_attribute("data-type"))
        for li in inside
    ]
    assert sorted(listed) == [(7, 9, "bod"), (12, 14, "dis"), (13, 14, "bod")]
    assert [li.find_element(By.TAG_NAME, "mark").text for li in inside][0].startswith("细胞")
    assert [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")] == ["bod", "dis", "sym"]
    legend_matches_marks(browser, result)
    assert not browser.find_elements(By.ID, "roles")  # an NER model's entities have no roles


def test_the_legend_lists_the_types_present_in_the_models_order(browser):
    from selenium.webdriver.common.by import By

    text = "张伟昨天去杭州参加了年会。"
    prediction = {
        "text": text,
        "entities": [
            {"start": 5, "end": 7, "type": "LOC", "score": 0.9},
            {"start": 0, "end": 2, "type": "PER", "score": 0.9},
        ],
    }
    labels = ["O", "B-ORG", "I-ORG", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    result = rendered(browser, {"task": "ner", "head": "token", "labels": labels}, prediction)
    assert [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")] == ["PER", "LOC"]  # no ORG
    assert legend_matches_marks(browser, result).keys() == {"PER", "LOC"}


def relation_record(text: str, triples: list[tuple]) -> dict:
    """A relation ``predict`` record: triples of (subject, its type, predicate, object, its type) by text."""

    def end(name, type_):
        start = text.index(name)
        return {"text": name, "start": start, "end": start + len(name), "type": type_}

    relations = [
        {"subject": end(s, st), "predicate": p, "object": end(o, ot), "score": 0.9} for s, st, p, o, ot in triples
    ]
    entities = {}
    for r in relations:
        for role in ("subject", "object"):
            e = r[role]
            entities[(e["start"], e["end"], role)] = {**e, "role": role, "score": 0.95}
    return {"text": text, "relations": relations, "entities": [entities[k] for k in sorted(entities)]}


TEXT = "《忘了》是张韶涵演唱的歌曲，收录在专辑《全面沦陷》中"
TRIPLES = [
    ("忘了", "歌曲", "歌手", "张韶涵", "人物"),
    ("忘了", "歌曲", "所属专辑", "全面沦陷", "音乐专辑"),
    ("全面沦陷", "歌曲", "歌手", "张韶涵", "人物"),
]


@pytest.mark.parametrize("typed", [True, False])
def test_relations_mark_each_span_once_and_list_every_triple(browser, typed):
    from selenium.webdriver.common.by import By

    triples = TRIPLES if typed else [(s, "", p, o, "") for s, _, p, o, _ in TRIPLES]
    labels = ["歌手 (歌曲→人物)", "所属专辑 (歌曲→音乐专辑)"] if typed else ["歌手", "所属专辑"]
    prediction = relation_record(TEXT, triples)
    result = rendered(browser, {"task": "relation", "labels": labels}, prediction)
    assert result.get_attribute("data-kind") == "relations"
    # 全面沦陷 is an object of one triple and the subject of another: one span, marked once with both types and roles
    doc = browser.find_element(By.ID, "doc")
    both = "音乐专辑 / 歌曲" if typed else ""
    assert marks(doc) == [(1, 3, "歌曲" if typed else ""), (5, 8, "人物" if typed else ""), (20, 24, both)]
    assert roles(doc) == ["subject", "object", "subject object"]
    assert plain_text(browser) == TEXT and not browser.find_elements(By.ID, "nested")
    legend = [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")]
    assert legend == (["歌曲", "人物", "音乐专辑"] if typed else ["无类型 no type"])  # types, not predicates or roles
    colour = legend_matches_marks(browser, result)
    assert len(colour) == (3 if typed else 1)
    role_legend_matches_marks(result)
    rows = browser.find_element(By.ID, "relations").find_elements(By.CSS_SELECTOR, "tr[data-predicate]")
    shown = [
        (r.get_attribute("data-subject"), r.get_attribute("data-predicate"), r.get_attribute("data-object"))
        for r in rows
    ]
    assert shown == [
        (
            f"{r['subject']['start']},{r['subject']['end']}",
            r["predicate"],
            f"{r['object']['start']},{r['object']['end']}",
        )
        for r in prediction["relations"]
    ]
    assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows] == [p for _, _, p, _, _ in TRIPLES]
    # each row names its subject and its object, in that order (the mark's text before its type subscript)
    named = [
        [browser.execute_script("return arguments[0].querySelector('mark').firstChild.textContent", cell) for cell in r]
        for r in ([row.find_elements(By.TAG_NAME, "td")[k] for k in (1, 3)] for row in rows)
    ]
    assert named == [[s, o] for s, _, _, o, _ in TRIPLES]


def test_a_text_without_relations_says_so(browser):
    from selenium.webdriver.common.by import By

    result = rendered(
        browser, {"task": "relation", "labels": ["歌手 (歌曲→人物)"]}, relation_record("今天天气很好。", [])
    )
    assert result.get_attribute("data-kind") == "relations" and "no relations found" in result.text
    assert not browser.find_elements(By.ID, "relations")


def test_many_types_and_an_entity_in_no_triple_keep_the_legend_true(browser):
    """The docs picture's case: 人物 and 音乐专辑 are the 1st and the 11th of the model's types (ten colours: the same
    one by their place in the model), and 歌曲 (the word) is found as a subject that no triple types."""
    from selenium.webdriver.common.by import By

    types = ["人物", "影视作品", "Date", "歌曲", "图书作品", "企业", "国家", "机构", "景点", "城市", "音乐专辑", "学校"]
    labels = [f"关系{i} (人物→{t})" for i, t in enumerate(types[1:])] + ["歌手 (歌曲→人物)", "所属专辑 (歌曲→音乐专辑)"]
    prediction = relation_record(TEXT, TRIPLES)
    start = TEXT.index("歌曲")
    prediction["entities"].append(
        {"text": "歌曲", "start": start, "end": start + 2, "type": "", "role": "subject", "score": 0.6}
    )
    result = rendered(browser, {"task": "relation", "labels": labels}, prediction)
    doc = browser.find_element(By.ID, "doc")
    assert marks(doc)[2] == (start, start + 2, "") and roles(doc)[2] == "subject"
    legend = [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")]
    assert legend == ["人物", "歌曲", "音乐专辑", "无类型 no type"]  # the types present, in the model's order
    colour = legend_matches_marks(browser, result)
    assert len(set(colour.values())) == 4
    role_legend_matches_marks(result)
