"""The serve page's example input, in headless Chromium: one that fits the served model (its task, and its labels
where they say what it was trained on), never one model's example for another (issue 47: every model was offered a
hotel review).

Most cases call the page's own ``exampleFor`` with a model's ``/v1/info`` written here (the page opened as a file);
two serve a tiny model and read the form: a news classifier, and a fill-mask model whose task brings its own example
(``example`` in ``/v1/info``).
"""

import pytest
from conftest import DATA, ROOT

PAGE = (ROOT / "ernie_ft" / "serving" / "static" / "index.html").as_uri()
HOTEL = "酒店"


def example(browser, info: dict, shown=("text",)) -> dict:
    """The input the page puts in its form for a model described by ``info`` showing the fields ``shown``."""
    browser.get(PAGE)  # no server: /v1/info fails, and the test gives the page its own
    return browser.execute_script("info = arguments[0]; return exampleFor(info, arguments[1]);", info, list(shown))


def classifier(labels: list[str]) -> dict:
    return {"task": "classify", "head": "sequence", "labels": labels}


NEWS_TAGS = sorted(
    {label for line in (DATA / "news_tags_train.tsv").read_text(encoding="utf-8").splitlines()[1:]
     for label in line.split("\t")[0].split("|")}
)  # fmt: skip


@pytest.mark.parametrize(
    "labels, expected",
    [
        (NEWS_TAGS, "比赛"),  # 体育-篮球, 娱乐-电影, ...: news (sports: the first of the topics most labels name)
        (["news_finance", "news_tech", "news_sports"], "比赛"),  # TNEWS's codes
        (["财经", "房产", "教育"], "成交额"),
        (["负面", "正面"], "东西和描述的一样"),  # sentiment: a short review
        (["导航", "播放音乐", "查天气"], "导航到"),  # intents: a command
        (["0", "1"], "公开讲座"),  # labels that say nothing: a neutral sentence, not a review
    ],
)
def test_a_classifier_gets_a_text_like_its_labels(browser, labels, expected):
    offered = example(browser, classifier(labels))
    assert set(offered) == {"text"} and expected in offered["text"] and HOTEL not in offered["text"]


def test_a_pair_classifier_gets_two_texts(browser):
    offered = example(browser, classifier(["0", "1"]), ("text", "text_pair"))
    assert set(offered) == {"text", "text_pair"} and offered["text"] and offered["text_pair"]
    assert offered["text"] != offered["text_pair"] and HOTEL not in offered["text"] + offered["text_pair"]


def bio(types: list[str]) -> list[str]:
    return ["O"] + [f"{p}-{t}" for t in types for p in "BI"]


@pytest.mark.parametrize(
    "labels, entities",
    [
        (bio(["LOC", "ORG", "PER"]), ["张伟", "杭州", "星河科技公司"]),
        (bio(["address", "book", "company", "game", "government", "movie", "name", "organization", "position"]),
         ["流浪地球", "北京", "郭帆", "导演"]),
        (["bod", "dis", "dru", "equ", "ite", "mic", "pro", "sym"], ["发热", "咳嗽", "肺部感染", "头孢曲松"]),  # nested
        (bio(["X", "Y"]), ["张伟", "杭州"]),  # types that say nothing: people, places and organisations
    ],
)  # fmt: skip
def test_an_ner_model_gets_a_sentence_with_entities_of_its_types(browser, labels, entities):
    offered = example(browser, {"task": "ner", "head": "token", "labels": labels})
    assert set(offered) == {"text"} and all(e in offered["text"] for e in entities), offered


@pytest.mark.parametrize(
    "labels, words",
    [
        (["作词 (歌曲→人物)", "歌手 (歌曲→人物)", "所属专辑 (歌曲→音乐专辑)"], ["演唱", "作词", "专辑"]),
        (["毕业院校 (人物→学校)", "出生地 (人物→地点)"], ["出生于", "毕业于"]),
        (["导演", "主演"], ["执导", "主演"]),  # classes without types
        (["X (甲→乙)"], ["出生于"]),  # predicates that say nothing: a person's facts
    ],
)
def test_a_relation_model_gets_a_sentence_with_its_predicates(browser, labels, words):
    offered = example(browser, {"task": "relation", "head": "pointer", "labels": labels})
    assert set(offered) == {"text"} and all(w in offered["text"] for w in words), offered


def test_a_qa_model_gets_a_question_and_a_context_that_answers_it(browser):
    info = {"task": "qa", "head": "span", "labels": []}
    offered = example(browser, info, ("question", "context", "id"))
    assert set(offered) == {"question", "context"} and "1903" in offered["context"] and HOTEL not in str(offered)


def test_the_models_own_example_comes_first_when_it_has_every_field(browser):
    own = {"text": "今天天气很[MASK]。"}
    assert example(browser, {"task": "pretrain", "head": "mlm", "labels": [], "example": own}) == own
    info = {**classifier(["0", "1"]), "example": {"text": "一"}}
    assert set(example(browser, info, ("text", "text_pair"))) == {"text", "text_pair"}  # lacks text_pair: not used


def test_no_kind_is_offered_another_kinds_example(browser):
    browser.get(PAGE)
    examples = browser.execute_script("return EXAMPLES")
    texts = {kind: {str(input_) for _, input_ in candidates} for kind, candidates in examples.items()}
    for kind, mine in texts.items():
        assert not any(mine & theirs for other, theirs in texts.items() if other != kind), kind
    assert not any(HOTEL in text for mine in texts.values() for text in mine)


# ------------------------------------------------------------------ served: the form as a user sees it


def form(browser, model_dir, tmp_path) -> dict:
    """The form's fields and texts when the page is opened on a server of ``model_dir``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait
    from test_serve import Server

    server = Server(str(model_dir), tmp_path)
    try:
        server.wait_ready()
        browser.get(server.url + "/")
        WebDriverWait(browser, 60).until(ready.visibility_of_element_located((By.ID, "form")))
        return {
            a.get_attribute("name"): a.get_attribute("value") for a in browser.find_elements(By.TAG_NAME, "textarea")
        }
    finally:
        server.stop()


def test_a_served_news_classifier_offers_news(browser, tmp_path, tmp_path_factory):
    from test_serve import train

    args = ["--train", str(DATA / "news_tags_train.tsv"), "--label-column", "labels", "--multi-label"]
    model = train(tmp_path_factory, "classify", *args, "--label-separator", "|", "--max-len", "32")
    fields = form(browser, model, tmp_path)
    assert list(fields) == ["text"] and "比赛" in fields["text"] and HOTEL not in fields["text"]


def test_a_served_fill_mask_model_offers_its_tasks_example(browser, pretrained, tmp_path):
    from ernie_ft.pretrain.task import Pretraining

    assert form(browser, pretrained, tmp_path) == Pretraining.example_input
