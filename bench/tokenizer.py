"""The text tokenizer of the real-size random checkpoints (`make-checkpoint --size 0.6b|1.7b`).

Benchmarks stream text at a words-per-second pace, and a segment starts once `lookahead_tokens`
tokens of it are in. A tokenizer that cuts words into more pieces than Qwen2's fills that lookahead
after fewer words and so flatters first audio. This one splits English and Chinese about as Qwen2's
byte-level BPE does (tests/bench/test_tokenizer.py measures it): the words of everyday prose
are mostly one token each, rarer ones two or three; the common Chinese characters (GB2312's 6,763)
are one token each and a few hundred common words one token too.

It is a real byte-level BPE trained with `tokenizers` on counts held in this repository (no file of
the machine is read), so every machine writes the same vocab.json and merges.txt:
- English: word counts from Python's reference and docstrings and common license texts
  (bench/corpus.py, written by scripts/make_bench_corpus.py), which are technical, plus
  the everyday words below that such text lacks (days, food, home, family, common verbs);
- Chinese: every GB2312 character, its punctuation, and the common words below.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, pre_tokenizers, trainers

from voicewire.bench import corpus as bench_corpus
from voicewire.engine.model.text_tokenizer import BPE_VOCAB_SIZE, new_bpe, write_tokenizer

# Times each hand-written entry is counted: about that of a corpus word in its top few hundred, so
# each becomes one token; capitalized forms (sentence starts) less often.
EVERYDAY_COUNT = 40
CAPITALIZED_COUNT = 8
CHINESE_CHAR_COUNT = 3
CHINESE_WORD_COUNT = 20

EVERYDAY_ENGLISH = """
I you he she it we they me him her us them my your his its our their mine yours hers ours theirs
myself yourself himself herself itself ourselves themselves who whom whose what which where when why
how this that these those a an the some any every each all both few many much more most other another
such no not and or but so if than then because of to in on at by for with from about into over under
up down out off again am is are was were be been being have has had do does did can could will would
shall should may might must
grandmother grandfather grandma grandpa uncle aunt cousin cousins animal animals dog dogs cat cats
horse horses bird birds cow cows
people person man woman men women child children boy girl baby family mother father mom dad parents
brother sister son daughter husband wife friend friends neighbor neighbour guest teacher student doctor
nurse driver police officer owner manager customer worker farmer king queen
home house apartment room rooms kitchen bedroom bathroom door doors window windows wall floor roof garden
yard street streets road roads city cities town village country world place places corner park school
office shop shops store stores market bank hospital church station airport hotel restaurant cafe cafes
bakery library museum bridge river lake sea ocean beach mountain mountains hill forest tree trees field
farm island
morning mornings afternoon evening evenings night nights day days today tonight tomorrow yesterday week
weeks weekend month months year years hour hours minute minutes second seconds moment time times
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July
August September October November December spring summer autumn fall winter holiday birthday
one two three four five six seven eight nine ten eleven twelve thirteen fifteen twenty thirty forty
fifty sixty hundred thousand million first second third fourth fifth last next half dozen
food breakfast lunch dinner meal bread butter cheese milk tea coffee water juice wine beer sugar salt
egg eggs meat chicken fish rice soup cake apple apples orange fruit vegetables potato potatoes tomato
cup cups glass plate bowl bottle table chair chairs bed desk box bag bags book books paper newspaper
newspapers letter letters phone computer car cars bus train plane bike ticket money price order
orders package delivery job work business company meeting email message call calls question questions
answer problem problems idea story news music song songs game games movie film picture photo
head face eye eyes ear ears nose mouth hand hands arm arms leg legs foot feet heart body hair voice
weather rain rained raining snow sun sunny wind cloud clouds cold hot warm cool wet dry
good bad great small big large little long short high low old new young early late fast slow quick
easy hard happy sad tired busy quiet loud clean dirty bright dark beautiful nice kind sure ready
free full empty open closed right wrong true important different same whole only own best better
worse worst sorry glad afraid hungry sick
red blue green yellow white black brown gray grey
go goes going went gone come comes coming came get gets getting got make makes making made take
takes taking took taken see sees seeing saw seen know knows knew known think thinks thought say says
said tell tells told give gives gave given find finds found look looks looked looking want wants
wanted use used work works worked working call called calling try tried trying ask asked asking need
needed feel feels felt leave left put keep kept let begin began start started starting stop stopped
help helped helping show showed shown hear heard play played run ran move moved moving live lived
living believe bring brought happen happened write wrote written sit sat stand stood lose lost pay
paid meet met learn learned change changed lead understand understood watch watched follow followed
speak spoke read spend spent grow grew open opened walk walked walking win won offer remember
remembered love loved consider appear buy bought wait waited waiting serve die died send sent
expect build stay stayed fall fell cut reach kill remain suggest raise pass sell sold decide decided
return returned explain hope hoped carry carried break broke drive drove eat ate eaten drink drank
sleep slept cook cooked wash washed clean cleaned wear wore sing sang dance talk talked laugh laughed
smile smiled cry cried arrive arrived ship shipped shipping deliver delivered book booked check
checked thank thanks thanked save saved wave waved close closed listen listened answer answered
please hello yes okay maybe really very almost always never often sometimes usually again still
already soon just also too here there everywhere somewhere anyone anything everyone everything
someone something nothing nobody between before after during until since while because though
although through across around behind above below near far away inside outside together else
tonight ago yet instead perhaps quite rather enough
"""

CHINESE_WORDS = """
我们 你们 他们 她们 自己 大家 什么 怎么 为什么 这个 那个 这些 那些 这样 那样 这里 那里 哪里 一个 一些
一下 一点 一起 一样 一直 一定 已经 还是 还有 就是 不是 没有 可以 可能 应该 需要 知道 觉得 认为 希望
喜欢 看到 听到 出来 起来 开始 现在 时候 时间 今天 明天 昨天 早上 上午 中午 下午 晚上 每天 今年 明年
去年 以后 以前 然后 后来 最后 刚才 马上 因为 所以 但是 可是 如果 虽然 而且 或者 只是 不过 非常 特别
比较 真的 很多 很好 不错 一般 问题 事情 东西 地方 工作 生活 学习 学校 老师 学生 朋友 孩子 家人 妈妈
爸爸 父母 先生 女士 小姐 公司 经理 客户 电话 手机 电脑 网上 中国 北京 上海 国家 世界 社会 经济 发展
文化 历史 政府 人民 城市 公园 医院 银行 商店 超市 饭店 餐厅 酒店 机场 车站 地铁 公交 汽车 火车 飞机
天气 下雨 太阳 春天 夏天 秋天 冬天 吃饭 早饭 午饭 晚饭 咖啡 米饭 面条 水果 喝水 睡觉 起床 上班 下班
回家 休息 散步 旅游 运动 音乐 电影 电视 新闻 故事 书店 图书馆 谢谢 不客气 对不起 没关系 请问 你好
再见 欢迎 帮助 告诉 回答 准备 决定 继续 完成 发现 解决 了解 介绍 参加 选择 安排 提供 服务 订单 包裹
快递 送到 收到 发货 星期 周末 小时 分钟 最近 一次 两个 几个 多少 第一 第二 所有 其他 别人 每个 有点
有些 当然 其实 一切 重要 简单 容易 困难 高兴 开心 快乐 漂亮 干净 安静 热闹 方便 便宜 经常 总是 从来
终于 突然 慢慢 一边 里面 外面 前面 后面 上面 下面 旁边 中间 附近 感觉 意思 声音 语音 文字 电话号码
地址 名字 年龄 身体 健康 医生 病人 办法 机会 环境 关系 影响 方面 情况 结果 原因 目的 计划 经验 能力
知识 科学 技术 系统 数据 信息 网络 互联网 手机号 微信
"""

CHINESE_PUNCTUATION = "，。！？、；：“”‘’（）《》…"

# The role names the prompt spells out: `<|im_start|>assistant\n` must be exactly 3 tokens.
ROLE_WORDS = ("assistant", "user", "system")


def gb2312_characters() -> list[str]:
    """GB2312's 6,763 hanzi (rows 16-87), the common characters of simplified Chinese."""
    decode = codecs.getdecoder("gb2312")
    found = []
    for row in range(0xB0, 0xF8):
        for cell in range(0xA1, 0xFF):
            try:
                found.append(decode(bytes((row, cell)))[0])
            except UnicodeDecodeError:  # the unassigned cells at the end of row 55
                pass
    return found


def _pairs(block: str) -> Iterator[tuple[str, int]]:
    fields = block.split()
    for word, count in zip(fields[::2], fields[1::2], strict=True):
        yield word, int(count)


def training_pieces() -> Iterator[str]:
    """The pre-tokens the BPE is trained on, each as often as it counts."""
    for word, count in _pairs(bench_corpus.SPACED):
        yield from [" " + word] * count
    for word, count in _pairs(bench_corpus.BARE):
        yield from [word] * count
    for word in EVERYDAY_ENGLISH.split():
        yield from [" " + word] * EVERYDAY_COUNT
        capital = word[0].upper() + word[1:]
        yield from [capital, " " + capital] * CAPITALIZED_COUNT
    for char in gb2312_characters() + list(CHINESE_PUNCTUATION):
        yield from [char] * CHINESE_CHAR_COUNT
    for word in CHINESE_WORDS.split():
        yield from [word] * CHINESE_WORD_COUNT
    for word in ROLE_WORDS:
        yield from [word] * EVERYDAY_COUNT


def train_bench_bpe() -> Tokenizer:
    """The trained byte-level BPE (about 16k learned entries; a few seconds), before padding and specials."""
    tok = new_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,  # a ceiling: the counts run out of pairs seen twice well before it
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_pieces(), trainer=trainer)
    return tok


def write_bench_tokenizer(folder: str | Path) -> None:
    """Write this tokenizer into `folder` in the published layout (vocab.json, merges.txt,
    tokenizer_config.json), the special tokens at their released ids."""
    write_tokenizer(folder, train_bench_bpe())
