"""The serve page's rendering of nested entities (``ner --nested``) and of relation triples, in headless Chromium.

The page (``ernie_ft/serving/static/index.html``) is opened as a file and its own ``render`` is called with a
model's ``/v1/info`` and a ``predict`` record written here, so each case (an entity inside another, one span with
two types, a span that is the subject of one triple and the object of another) is there whatever a model learnt.
"""

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
    # 全面沦陷 is an object of one triple and the subject of another: one span, marked once with both types
    both = "音乐专辑 / 歌曲" if typed else "object / subject"
    doc = browser.find_element(By.ID, "doc")
    assert marks(doc) == [(1, 3, "歌曲" if typed else "subject"), (5, 8, "人物" if typed else "object"), (20, 24, both)]
    assert plain_text(browser) == TEXT and not browser.find_elements(By.ID, "nested")
    legend = [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")]
    assert legend == (["歌曲", "人物", "音乐专辑"] if typed else ["subject", "object"])  # types, not predicates
    colours = {  # by the first type: one colour per type
        m.get_attribute("data-type").split(" / ")[0]: m.value_of_css_property("background-color")
        for m in doc.find_elements(By.TAG_NAME, "mark")
    }
    assert len(set(colours.values())) == len(colours) == (3 if typed else 2)
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
