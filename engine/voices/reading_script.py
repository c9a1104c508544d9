"""The reading script: sentences a user reads aloud, one at a time, to record the speech a voice is trained on.

Written for this project (not taken from a corpus). The voice is trained as the assistant's side of a
conversation, so most sentences are things said in conversation, polite and casual, with questions and
exclamations, besides descriptions; together they hold every mora of standard Japanese (the inventory below),
the common ones several times, so the voice has heard each sound it will have to say.
tests/test_reading_script.py phonemizes every sentence with Open JTalk and checks the coverage and the length.

Morae are written in katakana as Open JTalk pronounces them (`pyopenjtalk.g2p(text, kana=True)`): the particle
を as オ, は and へ as ワ and エ, ぢ and づ as ジ and ズ, and a long vowel as ー. Plain string code: no phonemizer
is imported here (the app does not ship one); the test brings it.
"""

from __future__ import annotations

from collections.abc import Iterable

READING_SCRIPT: tuple[str, ...] = (
    # Answers as the assistant would give them: polite, helpful, in conversation.
    "おはようございます。今日もよろしくお願いします。",
    "こんにちは。何かお手伝いできることはありますか？",
    "こんばんは、今日も一日お疲れさまでした。",
    "はい、わかりました。すぐに調べてみますね。",
    "なるほど、それはとても面白い考え方ですね。",
    "ごめんなさい、もう一度ゆっくり言ってもらえますか？",
    "ちょっと待ってくださいね、今確認しています。",
    "それなら、明るいうちに出かけたほうがいいと思います。",
    "お話ししてくださって、ありがとうございます。",
    "大丈夫ですよ、焦らなくてもまだ間に合います。",
    "その気持ち、よくわかります。無理はしないでくださいね。",
    "もしよければ、私と一緒に考えてみませんか？",
    "答えは三つあります。順番に説明しますね。",
    "残念ながら、その情報は見つかりませんでした。",
    "ええと、たしか先週の金曜日だったと思います。",
    "いい質問ですね。少し長くなりますが、聞いてください。",
    "では、そろそろ次の話題に移りましょうか。",
    "失礼しました、私の勘違いだったようです。",
    "ご希望があれば、いつでも気軽に声をかけてください。",
    "うーん、それはなかなか難しいところですね。",
    "今日の天気は、晴れのち曇りになるそうですよ。",
    "お昼ご飯は、もう食べましたか？",
    "その本なら、私も読んだことがあります。とても感動しました。",
    "すみません、その質問には、うまく答えられそうにありません。",
    "今の説明で、わかりにくいところはありませんでしたか？",
    "それでは、また明日お話ししましょう。おやすみなさい。",
    # Casual talk between friends.
    "ねえ、今日の晩ご飯、何にする？",
    "あー、お腹すいた。何か食べに行こうよ。",
    "えっ、本当に？全然知らなかった！",
    "そうそう、それが言いたかったんだよね。",
    "まあ、いっか。続きは明日考えればいいや。",
    "ちょっと、そこのリモコン取ってくれる？",
    "やばい、このままだと電車に乗り遅れちゃう！",
    "昨日さ、駅前で久しぶりに先輩に会ったんだ。",
    "それ、めっちゃかわいいじゃん。どこで買ったの？",
    "眠いなあ。もう少しだけ寝ててもいい？",
    "だから言ったでしょ、傘を持っていきなって。",
    "へえ、そんなお店があるんだ。今度連れてってよ。",
    "ほら見て、夕焼けの空がすごくきれいだよ。",
    "うん、わかった。じゃあ、また後で連絡するね。",
    "いやいや、そんなに謝らなくていいってば。",
    "あのさ、ちょっと相談したいことがあるんだけど、今いい？",
    # Questions.
    "この近くに、おいしいラーメン屋さんはありますか？",
    "週末は何をして過ごすのが好きですか？",
    "どうしてそう思ったのか、教えてくれませんか？",
    "駅までは歩いて何分くらいかかりますか？",
    "好きな季節はいつですか？私は秋が一番好きです。",
    "もう今日の宿題は全部終わったの？",
    "明日の会議って、何時からでしたっけ？",
    "どちらの色のほうが、私に似合うと思いますか？",
    "これって、誰が書いた手紙なんでしょうか？",
    # Exclamations and feelings.
    "わあ、すごい！本当に一人で作ったんですね！",
    "やった！ついに試験に合格したよ！",
    "うそでしょ、もうこんな時間になってるの？",
    "おめでとうございます！心からお祝いします。",
    "あっ、危ない！足元に気をつけて！",
    "ああ、よかった。荷物が無事に届いたんですね。",
    "すごく楽しかった！また絶対に来ようね。",
    # Descriptions of places, seasons and scenes.
    "窓の外では、小さな雨粒が静かに木の葉を揺らしていました。",
    "山の頂上からは、遠くの海までよく見渡せます。",
    "古い商店街には、昔ながらの和菓子屋が並んでいます。",
    "秋になると、公園のイチョウ並木が黄色く色づきます。",
    "夕暮れの川沿いを、犬を連れた人がのんびりと歩いていました。",
    "駅前の広場では、毎週日曜日に朝市が開かれます。",
    "冬の朝は空気が澄んでいて、富士山がくっきりと見えます。",
    "猫はこたつの中で丸くなって、気持ちよさそうに眠っています。",
    "図書館の奥には、誰も読まないような分厚い辞書が並んでいた。",
    "祖母の家の庭には、毎年春になると梅の花が咲きます。",
    # Palatalized morae (yōon) in everyday words.
    "旅行の計画を立てるのは、出発するより楽しいかもしれません。",
    "牛乳を一本と、卵を一パック買ってきてください。",
    "病院の受付は、午前九時から始まります。",
    "百円玉を三枚入れると、切符が出てきます。",
    "金魚すくいで、赤い金魚を三匹もらいました。",
    "会場には、六百人ものお客さんが集まりました。",
    "山脈の向こうに、ゆっくりと日が沈んでいきます。",
    "彼女はミュージカルが大好きで、毎月劇場に通っています。",
    "奇妙な音がして、みんな一斉に後ろを振り向いた。",
    "省略せずに、正式な名前で書いてください。",
    "留学中に、世界中にたくさんの友達ができました。",
    "三百年前に建てられたお寺が、今も大切に残されています。",
    "人気のホテルのビュッフェには、いつも長い行列ができている。",
    "発表の前は、いつも緊張して手が震えてしまいます。",
    "うさぎがぴょんぴょん跳ねながら、草むらに隠れた。",
    "コンピューターの調子が悪くて、朝から作業が進みません。",
    "このこんにゃくは、味がよく染みていておいしいですね。",
    "今朝のニュースによると、午後から雪が降るそうです。",
    "逆に考えれば、これは大きなチャンスかもしれません。",
    "白い子猫が、にゃあと小さな声で鳴きました。",
    "お寺の本堂には、金色に輝く如来像がまつられています。",
    "表紙の絵がかわいくて、つい手に取ってしまった。",
    "ヒューズが飛んで、部屋の電気が全部消えてしまった。",
    "財布の中には、三百円しか残っていなかった。",
    "脈が少し速いので、横になって休んでください。",
    "名字の読み方を、もう一度教えていただけますか？",
    "冷蔵庫に、そんなにぎゅうぎゅう物を詰め込まないで。",
    "略さずに言うと、どういう意味になるんですか？",
    "柔らかいジャガイモと、しょうゆ味のスープがよく合います。",
    # Loan words with the morae that only loan words have (ファ ティ ウォ ツァ ヴ ...).
    "ファイルを保存してから、パソコンの電源を切ってください。",
    "昔のフィルムカメラで撮った写真は、色が温かく見えます。",
    "駅の近くの小さなカフェで、コーヒーを飲みながら本を読みました。",
    "ナイフとフォークは、外側から順番に使います。",
    "誕生日パーティーには、友達が十人くらい来てくれました。",
    "今夜のディナーは、窓際の席を予約しておきました。",
    "彼の腕には、小さな星のタトゥーが彫ってありました。",
    "ヒンドゥー教の寺院を見学したのは、初めての経験でした。",
    "週末は、駅ビルでウィンドウショッピングをするつもりです。",
    "ウェイターさんが、笑顔でメニューを持ってきてくれた。",
    "毎朝、公園で三十分のウォーキングを続けています。",
    "シェフのおすすめは、季節の野菜を使ったパスタです。",
    "ジェットコースターは怖いけど、やっぱり乗ってみたい。",
    "ホテルのチェックインは、午後三時からになります。",
    "モーツァルトの曲を聴くと、不思議と気持ちが落ち着きます。",
    "二人のデュエットは、会場を大いに盛り上げた。",
    "彼女は幼い頃から、ヴァイオリンを習っていたそうです。",
    "ヴェネツィアの運河を、ゴンドラに乗ってゆっくり進みました。",
    "駅前の古着屋で、ヴィンテージのジャケットを見つけた。",
    "彼はバンドのヴォーカルとして、力強い声で歌い上げた。",
    "パリのルーヴル美術館には、一日では見きれないほどの作品があります。",
    "ソファに座って、ゆっくり映画でも見ませんか？",
    "プロデューサーの意見を聞いてから、最終的に決めましょう。",
    "フェリーに乗って、島まで一時間ほどの船旅を楽しみました。",
    "スマートフォンの画面が割れてしまったので、修理に出しました。",
    "このソフトウェアは、誰でも無料でダウンロードできます。",
    "ミネラルウォーターを二本、冷蔵庫で冷やしておいてね。",
    "友達とシェアハウスで暮らすのは、思ったより楽しいです。",
    "ティッシュを一枚もらってもいいですか？",
    "ハロウィンの夜、子どもたちが仮装して町を歩いていた。",
    # Plain, voiced and semi-voiced morae that everyday talk uses less (ヌ ヘ ペ ゾ ...).
    "犬の散歩のついでに、ポストに手紙を出してきます。",
    "部屋の掃除が終わったら、一緒にお茶にしましょう。",
    "娘の誕生日に、大きなクマのぬいぐるみを贈りました。",
    "雨に濡れた服は、すぐに乾かさないと風邪をひきますよ。",
    "お風呂のお湯がぬるくなったので、少し温め直しました。",
    "ペンと紙を貸してもらえますか？ちょっとメモしたいので。",
    "教科書の三十ページを開いてください。",
    "子どもの頃、ピアノの先生はとても厳しかった。",
    "変な夢を見て、夜中に目が覚めてしまいました。",
    "返事が遅くなって、本当に申し訳ありません。",
    "平和な毎日が、いつまでも続きますように。",
    "私は絵を描くのが、昔から下手なんです。",
    "動物園の象は、長い鼻で器用にリンゴをつかんでいた。",
    "家族みんなで、冷蔵庫の中を片付けました。",
    "想像していたよりも、ずっと静かで落ち着いた町でした。",
    "絶対に大丈夫だから、そんなに心配しないで。",
    "是非一度、私の故郷にも遊びに来てください。",
    "一匹の子犬が、しっぽを振りながらこちらに走ってきた。",
    "ピンク色の桜が、川沿いにずっと咲いています。",
    # More palatalized, voiced and semi-voiced morae.
    "急に雨が降ってきたので、近くのお店で雨宿りをしました。",
    "救急車のサイレンが聞こえて、思わず窓の外を見た。",
    "次の休日には、家族で海辺のキャンプ場に行く予定です。",
    "キャベツを細かく刻んで、お好み焼きの生地に混ぜます。",
    "駐車場がいっぱいだったので、少し離れた場所に停めました。",
    "その結果は、毎日の練習の大切さを如実に物語っている。",
    "百貨店の屋上には、昔は小さな遊園地があったそうです。",
    "冷たい風が、ひゅうひゅうと音を立てて窓を揺らしている。",
    "ひょっとして、あなたが噂の新人さんですか？",
    "この曲は、とても有名なミュージシャンが作ったそうです。",
    "リュックサックに、水筒とお弁当を詰めて出発だ！",
    "ギャラリーには、若い画家の作品がずらりと並んでいた。",
    "新しい映画のレビューを読んでから、見に行くか決めます。",
    "あと十秒で、ちょうど十二時になりますよ。",
    "陸上の八百メートルで、自己ベストを更新しました！",
    "裏ごししたかぼちゃのピューレで、甘いスープを作りました。",
    "玄関で靴を脱いだら、ちゃんとそろえておいてね。",
    "元気そうで安心しました。最近は忙しいですか？",
    "雑誌の特集を読んで、その町に行ってみたくなった。",
    "どうぞ、こちらの椅子にお座りください。",
    "お弁当を食べたら、なんだか眠くなってきちゃった。",
    "ボールを蹴るのは得意だけど、投げるのは苦手なんだ。",
    "僕の部屋の窓からは、小さな池とボートが見えます。",
    "ペットの犬が、玄関でずっと私の帰りを待っていた。",
    "この鉛筆、少しだけ削ってもらえる？",
    "ポケットの中に、小銭が何枚か入っていました。",
    "彼は英語もフランス語も、ペラペラに話せるんです。",
    "ピクニックのお弁当は、サンドイッチにしようか。",
    # Longer sentences, polite requests and more conversation.
    "駅を出てまっすぐ進み、二つ目の信号を右に曲がると、左手に大きな白い建物が見えてきます。",
    "昨日は朝から晩まで雨が降っていたので、一日中家で本を読んだり、映画を見たりして過ごしました。",
    "もし時間に余裕があるなら、少し遠回りをして、海の見える道を通って帰りませんか？",
    "この料理は、野菜を大きめに切って、弱火でじっくり煮込むのがおいしく作るコツです。",
    "明日は朝早く出かけるので、今夜は目覚まし時計を二つかけてから寝ることにします。",
    "お忙しいところ恐れ入りますが、少しだけお時間をいただけますか？",
    "承知いたしました。それでは、その内容でご予約をお取りしますね。",
    "申し訳ございませんが、本日の営業は終了いたしました。",
    "マジで？それって、めちゃくちゃ最高じゃん！",
    "なんか最近、時間がたつのがすごく早く感じるんだよね。",
    "ちょっと寒くない？窓、閉めてもいいかな。",
    "お疲れさま。今日のアルバイト、どうだった？",
    "悔しいけど、今回は相手のほうが強かったね。",
    "本当に、心の底から感謝しています。",
    "えー、また雨なの？せっかく洗濯したのに。",
    "やれやれ、やっと全部片付いたよ。",
    "怖かったね。でも、もう大丈夫だよ。",
    "この問題、どうやって解けばいいと思う？",
    "いつから、ここで働いているんですか？",
    "何か好きな食べ物はありますか？私はお寿司が大好きです。",
    "夜空には、数えきれないほどの星が輝いていた。",
    "小さな船が、波に揺られながらゆっくりと港に戻ってきた。",
    "朝の台所には、焼きたてのパンとコーヒーの香りが漂っていた。",
    "おじいさんは毎朝、庭の盆栽に水をやるのが日課です。",
    "森の奥へ進むと、澄んだ水の湧き出る泉がありました。",
    "グラウンドでは、野球部の生徒たちが汗を流して練習していた。",
    "ベランダで育てているトマトが、やっと赤くなってきました。",
    "窓を開けると、どこからか風鈴の涼しげな音が聞こえてきた。",
    "ゼロから始めるのは大変だけど、一歩ずつ進めば大丈夫です。",
    "全然眠れなかったから、今日は一日中ぼんやりしています。",
    "棚の一番上にある箱を、取ってもらえませんか？",
    "このお茶、香りがよくて、ほっとする味ですね。",
    "朝ご飯には、焼き魚と味噌汁と、炊きたてのご飯が一番です。",
    "自転車を盗まれないように、ちゃんと鍵をかけておこう。",
)

# ----------------------------------------------------------------------------------------------- the morae

PLAIN_MORAE = tuple("アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワ")
VOICED_MORAE = tuple("ガギグゲゴザジズゼゾダデドバビブベボ")  # ヂ ヅ are pronounced ジ ズ
SEMI_VOICED_MORAE = tuple("パピプペポ")
YOON_MORAE = tuple(head + small for head in "キシチニヒミリギジビピ" for small in "ャュョ")
SPECIAL_MORAE = ("ン", "ッ", "ー")  # the moraic nasal, the geminate, the long vowel
# The morae only loan words have, which a voice meets in names and everyday loan words (ファイル, パーティー...).
LOAN_MORAE = (
    "ファ", "フィ", "フェ", "フォ", "ティ", "ディ", "トゥ", "ドゥ", "ウィ", "ウェ", "ウォ",
    "シェ", "ジェ", "チェ", "ツァ", "デュ", "ヴァ", "ヴィ", "ヴ", "ヴェ", "ヴォ",
)
MORA_INVENTORY: frozenset[str] = frozenset(
    PLAIN_MORAE + VOICED_MORAE + SEMI_VOICED_MORAE + YOON_MORAE + SPECIAL_MORAE + LOAN_MORAE
)
# How often the script says each mora at least: the common ones (plain, voiced, semi-voiced and special)
# often enough to be heard in several words and positions, each yōon more than once, each loan mora once.
MIN_COMMON_COUNT = 5
MIN_YOON_COUNT = 2
MIN_LOAN_COUNT = 1

# ----------------------------------------------------------------------------------------------- the length

# Read Japanese runs at about 7 morae a second; a slow, careful reader at 5, a quick one at 9.
TYPICAL_MORAE_PER_SECOND = 7.0
SLOW_MORAE_PER_SECOND = 5.0
FAST_MORAE_PER_SECOND = 9.0
PAUSE_SECONDS = 0.3  # a reader's pause at a comma or between two sentences inside one line
# How long a sentence takes at the typical pace: long enough to carry a phrase's melody, short enough to
# read in one breath without a slip (the clip checks allow more on both sides: engine/voices/clip_check.py).
SCRIPT_SECONDS = (2.0, 12.0)

_SMALL_KANA = frozenset("ァィゥェォャュョヮ")
_PAUSE_MARKS = frozenset("、。！？!?,.")


def split_morae(katakana: str) -> list[str]:
    """The morae of a katakana reading: a small kana joins the kana before it (キャ, ファ); punctuation and
    anything else that is not katakana is dropped; ヲ counts as オ (how it is said)."""
    morae: list[str] = []
    for char in katakana:
        if char in _SMALL_KANA and morae:
            morae[-1] += char
        elif "ァ" <= char <= "ヺ" or char == "ー":
            morae.append("オ" if char == "ヲ" else char)
    return morae


def inner_pauses(text: str) -> int:
    """The pauses a reader makes inside a line: every comma or sentence end except the last mark."""
    return sum(1 for char in text.rstrip("".join(_PAUSE_MARKS)) if char in _PAUSE_MARKS)


def estimated_seconds(mora_count: int, pauses: int, morae_per_second: float = TYPICAL_MORAE_PER_SECOND) -> float:
    """How long a line of `mora_count` morae with `pauses` inner pauses takes to read at the given pace."""
    return mora_count / morae_per_second + pauses * PAUSE_SECONDS


def mora_counts(readings: Iterable[str]) -> dict[str, int]:
    """How often each mora occurs in katakana readings."""
    counts: dict[str, int] = {}
    for reading in readings:
        for mora in split_morae(reading):
            counts[mora] = counts.get(mora, 0) + 1
    return counts
