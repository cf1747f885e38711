"""scripts/cloze_qa.py: cloze questions from unlabelled text, read by the QA task as training data."""

import importlib.util
import json

from conftest import ROOT

from ernie_ft.data.squad import read_qa

spec = importlib.util.spec_from_file_location("cloze_qa", ROOT / "scripts" / "cloze_qa.py")
cloze_qa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cloze_qa)

LINES = [
    "国务院总理李强3月5日在北京人民大会堂作政府工作报告，提出今年经济增长目标为5%左右。",
    "报告说，去年全国城镇新增就业1256万人，居民消费价格上涨0.2%。",
    "上海市今年将新建保障性住房7万套，并在浦东新区开展城市更新试点。",
    "中国科学院的研究团队在青藏高原发现了一种新的植物，相关论文发表在国际期刊上。",
    "第十三条 用人单位应当依法建立和完善劳动规章制度，保障劳动者享有劳动权利、履行劳动义务。",
    "张伟说，这个项目总投资超过30亿元，预计明年6月建成投产。",
]


def write_corpus(tmp_path, copies=30):
    corpus = tmp_path / "news.txt"
    corpus.write_text("\n".join(LINES * copies) + "\n", encoding="utf-8")
    return corpus


def test_each_answer_is_where_the_question_has_its_question_word(tmp_path):
    out = tmp_path / "cloze.jsonl"
    assert (
        cloze_qa.main(
            [
                "--corpus",
                str(write_corpus(tmp_path)),
                "--output",
                str(out),
                "--questions",
                "40",
                "--dev",
                "5",
                "--min-context",
                "60",
                "--max-context",
                "200",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 40 and len((tmp_path / "cloze.dev.jsonl").read_text(encoding="utf-8").splitlines()) == 5
    words = set(cloze_qa.QUESTION_WORDS.values()) | {"什么"}
    for r in records:
        (answer,), (start,) = r["answers"]["text"], r["answers"]["answer_start"]
        context, question = r["context"], r["question"]
        assert 60 <= len(context) <= 200 and context[start : start + len(answer)] == answer
        assert answer not in question and question.endswith("？")
        # the question is the answer's sentence with the answer replaced by a question word
        sentence_start = max(context.rfind(p, 0, start) for p in "。！？；") + 1
        before = context[sentence_start:start]
        assert question.startswith(before) and question[len(before) :].startswith(tuple(words)), (question, answer)
    # the QA task reads them, every answer found at its offset
    examples, stats = read_qa(str(out), "--train")
    assert len(examples) == 40 and stats.answers == 40 and not stats.relocated and not stats.not_found


def test_numbers_run_through_their_units_and_times_ask_when():
    answers = {"3月5日": None, "1256万": None}
    sentence = "国务院总理李强3月5日在北京作报告，去年城镇新增就业1256万人。"
    for start, end, word in cloze_qa.entity_answers(sentence):
        if sentence[start:end] in answers:
            answers[sentence[start:end]] = word
    assert answers["1256万"] == "多少" and answers["3月5日"] == "什么时候"
    assert ("李强", "谁") in [(sentence[s:e], w) for s, e, w in cloze_qa.entity_answers(sentence)]


def test_the_same_seed_gives_the_same_questions_and_too_little_text_is_one_error(tmp_path, capsys):
    corpus = write_corpus(tmp_path)
    args = ["--corpus", str(corpus), "--questions", "20", "--dev", "2", "--min-context", "60", "--max-context", "200"]
    assert cloze_qa.main([*args, "--output", str(tmp_path / "a.jsonl")]) == 0
    assert cloze_qa.main([*args, "--output", str(tmp_path / "b.jsonl")]) == 0
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    capsys.readouterr()
    assert cloze_qa.main([*args[:3], "100000", *args[4:], "--output", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fewer than --questions 100000" in err and not (tmp_path / "c.jsonl").exists()
