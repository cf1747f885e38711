"""The CMRC 2018 and SQuAD metrics against values worked out by hand from their definitions."""

import random

import pytest

from ernie_ft.evaluation.squad import (
    cmrc_em,
    cmrc_f1,
    longest_common_substring,
    mixed_segmentation,
    qa_scores,
    remove_punctuation,
    shared_answer_share,
    squad_em,
    squad_f1,
    word_tokenize,
)


def test_mixed_segmentation_splits_chinese_and_punctuation_and_keeps_other_runs_as_words():
    assert mixed_segmentation("我爱NLP技术，GPT-4很强") == [
        "我",
        "爱",
        "nlp",
        "技",
        "术",
        "，",
        "gpt",
        "-",
        "4",
        "很",
        "强",
    ]
    # with punctuation removed, a listed mark is skipped without ending the run, as in the official script
    assert mixed_segmentation("我爱NLP技术，GPT-4很强", rm_punc=True) == [
        "我",
        "爱",
        "nlp",
        "技",
        "术",
        "gpt4",
        "很",
        "强",
    ]
    assert mixed_segmentation("总价$3.88元") == ["总", "价", "$", "3.88", "元"]
    assert mixed_segmentation(" iPhone 12 Pro ") == ["iphone", "12", "pro"]


def test_word_tokenize_follows_the_treebank_rules():
    assert word_tokenize("3.5%") == ["3.5", "%"]
    assert word_tokenize("12,000 people, 3:45") == ["12,000", "people", ",", "3:45"]
    assert word_tokenize("don't stop.") == ["do", "n't", "stop", "."]
    assert word_tokenize('he said "hi"') == ["he", "said", "``", "hi", "''"]
    assert word_tokenize("(a) [b]") == ["(", "a", ")", "[", "b", "]"]


def test_remove_punctuation_uses_the_official_list_only():
    assert remove_punctuation(" 《红楼梦》。 ") == "红楼梦"
    assert remove_punctuation("New York") == "new york"  # inner whitespace stays
    assert remove_punctuation("‘好’") == "‘好"  # the list has the closing quote only
    assert remove_punctuation("好……") == "好……"  # its '……' is two characters and never matches


def test_cmrc_exact_match():
    assert cmrc_em(["《红楼梦》"], "红楼梦") == 1.0
    assert cmrc_em(["曹雪芹"], "曹雪芹。") == 1.0
    assert cmrc_em(["曹雪芹"], "曹雪芹著") == 0.0
    assert cmrc_em(["New York"], "NewYork") == 0.0
    assert cmrc_em(["北京", "北京市"], "北京市") == 1.0  # any gold answer


@pytest.mark.parametrize(
    "golds,prediction,expected",
    [
        (["北京大学"], "在北京大学读书", 8 / 11),  # LCS 4; P 4/7, R 1
        (["一二三四"], "一二五三四", 4 / 9),  # a common substring, not subsequence: LCS 2; P 2/5, R 2/4
        (["iPhone 12 Pro"], "iPhone 12", 0.8),  # words: LCS 2; P 1, R 2/3
        (["苹果公司的iPhone 12"], "iPhone 12手机", 4 / 11),  # mixed: LCS ['iphone', '12']; P 2/4, R 2/7
        (["“黑暗森林”理论"], "黑暗森林理论", 1.0),  # punctuation removed before segmenting
        (["上海"], "北京", 0.0),
        (["北京", "北京大学"], "北京大学", 1.0),  # the best gold answer counts
        (["北京大学"], "", 0.0),
    ],
)
def test_cmrc_f1_hand_computed(golds, prediction, expected):
    assert cmrc_f1(golds, prediction) == pytest.approx(expected)


def test_squad_metric_is_a_bag_of_whitespace_words():
    assert squad_f1(["the Eiffel Tower"], "Eiffel Tower in Paris") == pytest.approx(2 / 3)
    assert squad_em(["The Eiffel Tower!"], "eiffel tower") == 1.0
    # Chinese has no spaces: the whole string is one word, so partial overlap scores nothing
    assert squad_f1(["北京大学"], "在北京大学读书") == 0.0
    assert cmrc_f1(["北京大学"], "在北京大学读书") > 0.7


@pytest.mark.parametrize("metric", ["cmrc2018", "squad"])
def test_unanswerable_questions_need_an_empty_prediction(metric):
    em, f1 = {"cmrc2018": (cmrc_em, cmrc_f1), "squad": (squad_em, squad_f1)}[metric]
    assert em([], "") == f1([], "") == 1.0
    assert em([], "北京") == f1([], "北京") == 0.0


def test_qa_scores_are_percentages_with_answerable_and_unanswerable_splits():
    scores = qa_scores(["红楼梦", "", "北京", "在北京大学读书"], [["《红楼梦》"], [], ["上海"], ["北京大学"]])
    assert scores["metric"] == "cmrc2018" and scores["questions"] == 4
    assert scores["em"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 1 + 0 + 8 / 11) / 4)
    assert scores["has_ans_questions"] == 3 and scores["no_ans_questions"] == 1
    assert scores["has_ans_em"] == pytest.approx(100 / 3) and scores["no_ans_em"] == 100.0
    assert scores["has_ans_f1"] == pytest.approx(100 * (1 + 8 / 11) / 3)
    plain = qa_scores(["红楼梦"], [["红楼梦"]], "squad")
    assert plain == {"em": 100.0, "f1": 100.0, "metric": "squad", "questions": 1}


def test_longest_common_substring_matches_the_official_dynamic_programme():
    def official(s1, s2):  # find_lcs of cmrc2018_evaluate.py, the length only
        m = [[0] * (len(s2) + 1) for _ in range(len(s1) + 1)]
        best = 0
        for i in range(len(s1)):
            for j in range(len(s2)):
                if s1[i] == s2[j]:
                    m[i + 1][j + 1] = m[i][j] + 1
                    best = max(best, m[i + 1][j + 1])
        return best

    rng = random.Random(0)
    for _ in range(300):
        a = [rng.choice("甲乙丙丁") for _ in range(rng.randint(0, 12))]
        b = [rng.choice("甲乙丙丁") for _ in range(rng.randint(0, 12))]
        assert longest_common_substring(a, b) == official(a, b), (a, b)


def test_the_shared_answer_share_counts_questions_answered_where_another_on_their_context_was():
    contexts = ["甲", "甲", "甲", "乙", "乙", "丙"]  # 丙 has one question: not counted
    assert shared_answer_share(contexts, [3, 3, 7, 0, 5, 9]) == (pytest.approx(2 / 5), 5)
    assert shared_answer_share(contexts, [3, 3, 3, 0, 0, 9]) == (1.0, 5)
    assert shared_answer_share(contexts, [None, None, 1, 0, 5, 9]) == (0.0, 5)  # no answer is never shared
    assert shared_answer_share(["甲", "乙"], [1, 1]) == (0.0, 0)
