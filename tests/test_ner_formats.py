"""NER files: every format and tag scheme round-trips through character spans; bad files are clear errors."""

import json
import random

import pytest
from conftest import DATA

from ernie_ft.errors import UserError
from ernie_ft.ner.formats import NerExample, detect_format, read_ner
from ernie_ft.ner.tags import parse_tag, spans_to_tags, tags_to_spans
from ernie_ft.ner.writers import write_cluener, write_conll, write_spans

BIO, BIOES = DATA / "ner_test_bio.conll", DATA / "ner_test_bioes.conll"
CLUENER, SPANS = DATA / "ner_train.jsonl", DATA / "ner_dev.jsonl"


def parsed(tags):
    return [parse_tag(t, "test") for t in tags]


def content(examples):
    return [(e.text, e.entities) for e in examples]


@pytest.mark.parametrize("path,scheme,sep", [(BIO, "bio", " "), (BIOES, "bioes", "\t")])
def test_conll_file_round_trips_byte_for_byte(path, scheme, sep):
    examples = read_ner(str(path), "--test")
    assert len(examples) == 38 and all(e.entities for e in examples[:5])
    assert write_conll(examples, scheme, sep) == path.read_text(encoding="utf-8")


def test_bio_and_bioes_files_hold_the_same_entities_and_every_scheme_round_trips(tmp_path):
    bio, bioes = read_ner(str(BIO), "--test"), read_ner(str(BIOES), "--test")
    assert content(bio) == content(bioes)
    first = bio[0]  # hand-checked against the file: 'Tom的新书由阿里巴巴出版，首印3万册。'
    assert first.text == "Tom的新书由阿里巴巴出版，首印3万册。" and first.line == 1
    assert first.entities == ((0, 3, "PER"), (7, 11, "ORG"))
    for scheme in ("bmes", "io"):
        path = tmp_path / f"{scheme}.conll"
        path.write_text(write_conll(bio, scheme), encoding="utf-8")
        assert any(f"{'M' if scheme == 'bmes' else 'I'}-ORG" in line for line in path.read_text().splitlines())
        again = read_ner(str(path), "--test")
        assert content(again) == content(bio)  # the sample has no two same-type entities side by side (IO)
        assert write_conll(again, scheme) == path.read_text(encoding="utf-8")


def test_jsonl_formats_round_trip_and_convert_into_each_other(tmp_path):
    cluener = read_ner(str(CLUENER), "--train")
    assert len(cluener) == 320
    written = write_cluener(cluener).splitlines()
    original = CLUENER.read_text(encoding="utf-8").splitlines()
    assert [json.loads(a) for a in written] == [json.loads(b) for b in original]
    spans = read_ner(str(SPANS), "--dev")
    assert write_spans(spans) == SPANS.read_text(encoding="utf-8")
    converted = tmp_path / "as_cluener.jsonl"
    converted.write_text(write_cluener(spans), encoding="utf-8")
    assert content(read_ner(str(converted), "--dev")) == content(spans)
    record = json.loads(original[0])  # hand-checked: inclusive CLUENER ends become exclusive ends
    assert record["label"]["PER"] == {"吴敏": [[0, 1]]} and (0, 2, "PER") in cluener[0].entities


def test_word_level_conll_keeps_spaces_between_latin_words(tmp_path):
    path = tmp_path / "words.conll"
    source = "Tom\tB-PER\nlives\tO\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n在\tO\n北京\tB-LOC\n\n"
    path.write_text(source, encoding="utf-8")
    [example] = read_ner(str(path), "--train")
    assert example.text == "Tom lives in New York在北京"
    assert example.entities == ((0, 3, "PER"), (13, 21, "LOC"), (22, 24, "LOC"))
    assert write_conll([example], "bio") == source


@pytest.mark.parametrize(
    "tags,scheme,spans,invalid",
    [
        (["O", "I-PER", "I-PER", "O"], "bio", [(1, 3, "PER")], [1]),
        (["B-PER", "I-LOC", "I-LOC"], "bio", [(0, 1, "PER"), (1, 3, "LOC")], [1]),
        (["B-PER", "B-PER", "I-PER"], "bio", [(0, 1, "PER"), (1, 3, "PER")], []),
        (["I-PER", "I-PER", "O", "I-LOC", "I-PER"], "io", [(0, 2, "PER"), (3, 4, "LOC"), (4, 5, "PER")], []),
        (["B-PER", "I-PER", "E-PER", "S-LOC"], "bioes", [(0, 3, "PER"), (3, 4, "LOC")], []),
        (["B-PER", "I-PER", "O"], "bioes", [(0, 2, "PER")], [1]),  # never closed by E-
        (["S-PER", "E-PER", "O"], "bioes", [(0, 1, "PER"), (1, 2, "PER")], [1]),
        (["B-LOC", "I-LOC", "E-PER"], "bmes", [(0, 2, "LOC"), (2, 3, "PER")], [1, 2]),
    ],
)
def test_tags_to_spans_repairs_and_counts_invalid_sequences(tags, scheme, spans, invalid):
    assert tags_to_spans(parsed(tags), scheme) == (spans, invalid)


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes", "io"])
def test_random_spans_survive_every_scheme(scheme):
    rng = random.Random(scheme)
    for _ in range(200):
        n, spans, i = rng.randint(1, 30), [], 0
        while i < n:
            length = rng.randint(1, 4)
            if rng.random() < 0.4 and i + length <= n:
                kind = rng.choice("AB")
                if scheme == "io" and spans and spans[-1][1] == i and spans[-1][2] == kind:
                    kind = "C"  # IO cannot separate two touching entities of one type
                spans.append((i, i + length, kind))
                i += length
            else:
                i += 1
        tags = spans_to_tags(n, spans, scheme)
        assert tags_to_spans(parsed(tags), scheme) == (spans, [])


def test_bmes_tags_are_written_with_m(tmp_path):
    assert spans_to_tags(5, [(0, 1, "X"), (1, 5, "Y")], "bmes") == ["S-X", "B-Y", "M-Y", "M-Y", "E-Y"]
    assert spans_to_tags(3, [(0, 3, "Y")], "bioes") == ["B-Y", "I-Y", "E-Y"]


def write(tmp_path, name, text, bom=False):
    path = tmp_path / name
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return str(path)


def test_invalid_tags_are_repaired_counted_and_reported_with_lines(tmp_path, capsys):
    path = write(tmp_path, "bad.conll", "张 B-PER\n三 I-PER\n去 O\n北 I-LOC\n京 I-LOC\n\n李 B-PER\n四 I-LOC\n")
    examples = read_ner(path, "--train")
    assert [e.entities for e in examples] == [((0, 2, "PER"), (3, 5, "LOC")), ((0, 1, "PER"), (1, 2, "LOC"))]
    err = capsys.readouterr().err
    assert "2 tags break the BIO scheme" in err and "lines 4, 8" in err and "starts one" in err


def test_bom_windows_line_endings_and_trailing_blank_lines_change_nothing(tmp_path):
    clean = BIO.read_text(encoding="utf-8")
    messy = write(tmp_path, "messy.conll", "\n" + clean.replace("\n", "\r\n") + "\r\n\r\n\n", bom=True)
    assert content(read_ner(messy, "--test")) == content(read_ner(str(BIO), "--test"))
    lines = SPANS.read_text(encoding="utf-8")
    messy = write(tmp_path, "messy.jsonl", lines.replace("\n", "\r\n") + "\r\n\r\n", bom=True)
    assert content(read_ner(messy, "--dev")) == content(read_ner(str(SPANS), "--dev"))


@pytest.mark.parametrize(
    "name,text,fragments",
    [
        (
            "range.jsonl",
            '{"text": "张三在北京", "entities": [{"start": 3, "end": 9, "type": "LOC"}]}\n',
            ["range.jsonl:1", "characters 3 to 8", "outside the text (5 characters"],
        ),
        (
            "overlap.jsonl",
            '{"text": "a", "label": {}}\n{"text": "北京大学", "label": {"ORG": {"北京大学": [[0, 3]]}, '
            '"LOC": {"北京": [[0, 1]]}}}\n',
            ["overlap.jsonl:2", "overlaps", "--overlapping keep-longest"],
        ),
        (
            "mismatch.jsonl",
            '{"text": "张三在北京", "label": {"PER": {"张三": [[0, 2]]}}}\n',
            ["mismatch.jsonl:1", "'张三在'", "inclusive"],
        ),
        ("badtag.conll", "张 B-PER\n三 X-PER\n", ["badtag.conll:2", "'X-PER'"]),
        ("notag.conll", "张 B-PER\n三\n", ["notag.conll:2", "token and its tag"]),
        ("plain.txt", "张三在北京工作\n李四在上海\n", ["plain.txt", "plain text without entities", "--format"]),
        ("nolabel.jsonl", '{"text": "张三在北京"}\n', ["nolabel.jsonl:1", '"label" must be an object']),
        ("empty.conll", "\n\n", ["empty.conll", "empty"]),
    ],
)
def test_bad_files_raise_one_clear_error_naming_the_line(tmp_path, name, text, fragments):
    with pytest.raises(UserError) as error:
        read_ner(write(tmp_path, name, text), "--train")
    message = str(error.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_keep_longest_drops_the_nested_entity_and_says_so(tmp_path, capsys):
    path = write(
        tmp_path,
        "nested.jsonl",
        '{"text": "《北京大学校史》出版", "label": {"book": {"《北京大学校史》": [[0, 7]]}, '
        '"ORG": {"北京大学": [[1, 4]]}}}\n',
    )
    [example] = read_ner(path, "--train", overlapping="keep-longest")
    assert example.entities == ((0, 8, "book"),)
    assert "dropped 1 entities" in capsys.readouterr().err


def test_formats_are_detected_from_content_and_unlabelled_input_reads_as_text(tmp_path):
    for path, fmt in ((BIO, "conll"), (BIOES, "conll"), (CLUENER, "cluener"), (SPANS, "spans")):
        assert detect_format(path.read_text(encoding="utf-8").split("\n")) == fmt
    plain = write(tmp_path, "in.txt", "张三在北京工作\n\nLucy去了Google 😊\n")
    assert [(e.text, e.line) for e in read_ner(plain, "--input", labelled=False)] == [
        ("张三在北京工作", 1),
        ("Lucy去了Google 😊", 3),
    ]
    assert read_ner(str(SPANS), "--input", labelled=False)[0].entities == ()
    forced = read_ner(str(CLUENER), "--train", fmt="cluener")
    assert content(forced) == content(read_ner(str(CLUENER), "--train"))
    assert isinstance(forced[0], NerExample)
