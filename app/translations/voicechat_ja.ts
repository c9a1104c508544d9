<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="ja_JP" sourcelanguage="en_US">
  <context>
    <name>AssistantItem</name>
    <message>
      <location filename="../widgets/transcript.py" line="60" />
      <source>Assistant</source>
      <translation>アシスタント</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="71" />
      <source>greedy</source>
      <translation>グリーディ</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="71" />
      <source>sampling</source>
      <translation>サンプリング</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="84" />
      <source>(no text)</source>
      <translation>（テキストなし）</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="91" />
      <source>%1 s of audio</source>
      <translation>音声 %1 秒</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="93" />
      <source>interrupted</source>
      <translation>中断</translation>
    </message>
    <message>
      <source>interrupted after %1 s</source>
      <translation>%1 秒で中断</translation>
    </message>
  </context>
  <context>
    <name>ContextGauge</name>
    <message>
      <location filename="../widgets/meters.py" line="210" />
      <source>Context %1 / %2 tokens</source>
      <translation>コンテキスト %1 / %2 トークン</translation>
    </message>
  </context>
  <context>
    <name>CrashReporter</name>
    <message>
      <source>VoiceChat - unexpected error</source>
      <translation>VoiceChat - 予期しないエラー</translation>
    </message>
    <message>
      <source>An unexpected error occurred.</source>
      <translation>予期しないエラーが発生しました。</translation>
    </message>
    <message>
      <source>Details were written to the log file:</source>
      <translation>詳細はログファイルに書き込まれました：</translation>
    </message>
    <message>
      <source>Please attach it when you report the problem.</source>
      <translation>問題を報告するときに添付してください。</translation>
    </message>
    <message>
      <source>Open log folder</source>
      <translation>ログフォルダーを開く</translation>
    </message>
  </context>
  <context>
    <name>EngineMessages</name>
    <message>
      <source>No microphone was found. Connect one and try again.</source>
      <translation>マイクが見つかりません。接続してからもう一度お試しください。</translation>
    </message>
    <message>
      <source>No speaker was found. Connect one and try again.</source>
      <translation>スピーカーが見つかりません。接続してからもう一度お試しください。</translation>
    </message>
    <message>
      <source>The microphone "{name}" was not found. It may have been unplugged. Available: {available}.</source>
      <translation>マイク「{name}」が見つかりません。抜かれた可能性があります。使用できるデバイス: {available}。</translation>
    </message>
    <message>
      <source>The speaker "{name}" was not found. It may have been unplugged. Available: {available}.</source>
      <translation>スピーカー「{name}」が見つかりません。抜かれた可能性があります。使用できるデバイス: {available}。</translation>
    </message>
    <message>
      <source>The microphone "{name}" could not be opened: it may be unplugged, in use by another application, or not support the format. ({error})</source>
      <translation>マイク「{name}」を開けませんでした。抜かれている、他のアプリが使用中、または形式に対応していない可能性があります。</translation>
    </message>
    <message>
      <source>The speaker "{name}" could not be opened: it may be unplugged, in use by another application, or not support the format. ({error})</source>
      <translation>スピーカー「{name}」を開けませんでした。抜かれている、他のアプリが使用中、または形式に対応していない可能性があります。</translation>
    </message>
    <message>
      <source>The default microphone could not be opened: it may be unplugged, in use by another application, or not support the format. ({error})</source>
      <translation>既定のマイクを開けませんでした。抜かれている、他のアプリが使用中、または形式に対応していない可能性があります。</translation>
    </message>
    <message>
      <source>The default speaker could not be opened: it may be unplugged, in use by another application, or not support the format. ({error})</source>
      <translation>既定のスピーカーを開けませんでした。抜かれている、他のアプリが使用中、または形式に対応していない可能性があります。</translation>
    </message>
    <message>
      <source>{source} is not downloaded and there is no network connection. Connect to the internet, choose a local model folder, or use the demo model.</source>
      <translation>{source} はまだダウンロードされておらず、ネットワークに接続されていません。インターネットに接続するか、ローカルのモデルフォルダーを選ぶか、デモモデルを使ってください。</translation>
    </message>
    <message>
      <source>Downloading {source} failed: {error}</source>
      <translation>{source} のダウンロードに失敗しました。</translation>
    </message>
    <message>
      <source>{source} is not downloaded yet.</source>
      <translation>{source} はまだダウンロードされていません。</translation>
    </message>
    <message>
      <source>No model was given: choose a model folder or a Hub repo id.</source>
      <translation>モデルが指定されていません。モデルフォルダーか Hub のリポジトリ ID を選んでください。</translation>
    </message>
    <message>
      <source>The GPU ran out of memory during the prefill; try a shorter context.</source>
      <translation>プレフィル中に GPU のメモリが不足しました。文脈を短くしてお試しください。</translation>
    </message>
    <message>
      <source>The voice {voice} was trained for {base}, not for the loaded model {model}.</source>
      <translation>声「{voice}」は {base} 用に学習されたもので、読み込まれているモデル {model} 用ではありません。</translation>
    </message>
    <message>
      <source>The voice {voice} does not fit this model: it targets {module}, which the model does not have.</source>
      <translation>声「{voice}」はこのモデルに合いません。対象の {module} がこのモデルにありません。</translation>
    </message>
    <message>
      <source>The voice {voice} does not fit this model: {module} is {rows}×{columns}, but the adapter's lora_A is {a_shape} and lora_B is {b_shape}.</source>
      <translation>声「{voice}」はこのモデルに合いません。{module} は {rows}×{columns} ですが、アダプターの lora_A は {a_shape}、lora_B は {b_shape} です。</translation>
    </message>
    <message>
      <source>The voice folder {folder} does not exist.</source>
      <translation>声のフォルダー {folder} がありません。</translation>
    </message>
    <message>
      <source>The voice folder {folder} has no {file}.</source>
      <translation>声のフォルダー {folder} に {file} がありません。</translation>
    </message>
    <message>
      <source>{file} is not valid JSON ({error}).</source>
      <translation>{file} は正しい JSON ではありません。</translation>
    </message>
    <message>
      <source>{voice} is a {kind} adapter; only LoRA voices are supported.</source>
      <translation>{voice} は {kind} アダプターです。使えるのは LoRA の声だけです。</translation>
    </message>
    <message>
      <source>{voice} is a DoRA adapter; only plain LoRA voices are supported.</source>
      <translation>{voice} は DoRA アダプターです。使えるのは通常の LoRA の声だけです。</translation>
    </message>
    <message>
      <source>{voice} also replaces whole modules ({modules}); only LoRA weights are supported.</source>
      <translation>{voice} はモジュール全体も置き換えます ({modules})。使えるのは LoRA の重みだけです。</translation>
    </message>
    <message>
      <source>{file} is unreadable ({error}).</source>
      <translation>{file} を読めません（壊れているか、形式が違います）。</translation>
    </message>
    <message>
      <source>{voice} holds a tensor that is not a LoRA weight: {key}.</source>
      <translation>{voice} に LoRA の重みではないテンソルがあります: {key}。</translation>
    </message>
    <message>
      <source>{voice} holds no LoRA weights.</source>
      <translation>{voice} には LoRA の重みがありません。</translation>
    </message>
    <message>
      <source>{voice}: module {module} has {weight} missing.</source>
      <translation>{voice}: モジュール {module} の {weight} がありません。</translation>
    </message>
    <message>
      <source>The voice {voice} targets {module}, a {kind}; only linear layers are supported.</source>
      <translation>声 {voice} は {module} ({kind}) を対象にしています。使えるのは線形層だけです。</translation>
    </message>
    <message>
      <source>The model folder {folder} cannot be used: {problems}</source>
      <translation>モデルフォルダー {folder} は使えません: {problems}</translation>
    </message>
    <message>
      <source>; </source>
      <translation>、</translation>
    </message>
    <message>
      <source>{folder} is not a folder</source>
      <translation>{folder} はフォルダーではありません</translation>
    </message>
    <message>
      <source>{file} is missing</source>
      <translation>{file} がありません</translation>
    </message>
    <message>
      <source>{file} is not valid JSON ({error})</source>
      <translation>{file} は正しい JSON ではありません</translation>
    </message>
    <message>
      <source>{file} does not hold a JSON object</source>
      <translation>{file} が JSON オブジェクトではありません</translation>
    </message>
    <message>
      <source>{file} lacks {keys}</source>
      <translation>{file} に {keys} がありません</translation>
    </message>
    <message>
      <source>{file} (the weights) is missing</source>
      <translation>{file} (重み) がありません</translation>
    </message>
    <message>
      <source>{file} lacks {count} tensors (e.g. {names})</source>
      <translation>{file} にテンソルが {count} 個足りません (例: {names})</translation>
    </message>
    <message>
      <source>{file} has tensors of the wrong shape for config.json: {tensors}</source>
      <translation>{file} に config.json と形の合わないテンソルがあります: {tensors}</translation>
    </message>
    <message>
      <source>{file} is unreadable (truncated or corrupt: {error})</source>
      <translation>{file} を読めません（途中で切れているか壊れています）</translation>
    </message>
    <message>
      <source>{file} lacks the {{"format": "pt"}} metadata that the loader requires</source>
      <translation>{file} に読み込みに必要なメタデータ {{"format": "pt"}} がありません</translation>
    </message>
    <message>
      <source>{file} is truncated ({size} of {expected} bytes)</source>
      <translation>{file} が途中で切れています ({expected} バイト中 {size} バイト)</translation>
    </message>
    <message>
      <source>{file} does not describe a model liquid-audio can build ({error})</source>
      <translation>{file} は liquid-audio が組み立てられるモデルを表していません</translation>
    </message>
    <message>
      <source>the audio decoder is missing (neither audio_detokenizer/ nor {file})</source>
      <translation>音声デコーダーがありません (audio_detokenizer/ も {file} もありません)</translation>
    </message>
    <message>
      <source>loading failed: {error}</source>
      <translation>読み込みに失敗しました</translation>
    </message>
    <message>
      <source>The download was cancelled; the files already downloaded are kept for next time.</source>
      <translation>ダウンロードを中止しました。ダウンロード済みのファイルは次回もそのまま使われます。</translation>
    </message>
    <message>
      <source>No CUDA GPU: running eagerly on the CPU (much slower than real time).</source>
      <translation>CUDA 対応 GPU がありません: CPU で実行しています (実時間よりかなり遅くなります)。</translation>
    </message>
    <message>
      <source>CUDA graphs disabled: running eagerly on the GPU.</source>
      <translation>CUDA グラフは無効です: GPU で逐次実行しています。</translation>
    </message>
    <message>
      <source>CUDA graph capture failed ({error}); running eagerly on the GPU.</source>
      <translation>CUDA グラフを作成できませんでした。GPU 上でグラフなしで実行します。</translation>
    </message>
    <message>
      <source>demo (random weights)</source>
      <translation>デモ（ランダムな重み）</translation>
    </message>
    <message>
      <source>The model is not loaded yet.</source>
      <translation>モデルはまだ読み込まれていません。</translation>
    </message>
    <message>
      <source>That turn has no audio to replay.</source>
      <translation>この発言には再生できる音声がありません。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="103" />
      <source>The conversation history cannot be opened ({error}); conversations are not saved.</source>
      <translation>会話の履歴を開けません。会話は保存されません。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="104" />
      <source>The conversation history was made by a newer version of VoiceChat (format {version}); it was moved to {folder} and a new history was started.</source>
      <translation>会話の履歴は新しいバージョンの VoiceChat で作られたものです（形式 {version}）。{folder} に移し、新しい履歴を始めました。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="105" />
      <source>The conversation history was damaged ({error}); it was moved to {folder} and a new history was started.</source>
      <translation>会話の履歴が壊れていました。{folder} に移し、新しい履歴を始めました。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="106" />
      <source>A turn could not be saved to the history ({error}).</source>
      <translation>発言を履歴に保存できませんでした。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="107" />
      <source>The disk is full: conversations are not being saved for now. The chat goes on, and saving resumes (with the turns since) as soon as there is room.</source>
      <translation>ディスクがいっぱいのため、今は会話を保存できません。会話はそのまま続けられ、空きができしだい（それまでの発言も含めて）保存を再開します。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="108" />
      <source>That conversation is no longer in the history.</source>
      <translation>その会話はもう履歴にありません。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="109" />
      <source>The conversation history is not available.</source>
      <translation>会話の履歴を利用できません。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="110" />
      <source>Load a model to continue a conversation.</source>
      <translation>会話を続けるにはモデルを読み込んでください。</translation>
    </message>
    <message>
      <location filename="../engine_messages.py" line="111" />
      <source>This conversation was held with the model {saved}, not {loaded}: load that model to continue it. It can still be read, replayed and exported.</source>
      <translation>この会話は {loaded} ではなくモデル {saved} で行われました。続けるにはそのモデルを読み込んでください。読む・再生する・エクスポートすることはできます。</translation>
    </message>
    <message>
      <source>No model is loaded, so there is no voice to switch.</source>
      <translation>モデルが読み込まれていないため、声を切り替えられません。</translation>
    </message>
    <message>
      <source>There is nothing to export yet.</source>
      <translation>まだエクスポートするものがありません。</translation>
    </message>
    <message>
      <source>Audio capture failed.</source>
      <translation>録音に失敗しました。</translation>
    </message>
    <message>
      <source>Audio playback failed.</source>
      <translation>再生に失敗しました。</translation>
    </message>
    <message>
      <source>The previous take is still being processed; press again in a moment.</source>
      <translation>前の録音をまだ処理しています。少し待ってからもう一度押してください。</translation>
    </message>
    <message>
      <source>The microphone "{name}" stopped delivering audio (unplugged?). It will be reopened on the next push-to-talk.</source>
      <translation>マイク「{name}」から音声が届かなくなりました（抜かれた可能性があります）。次に押して話すときに開き直します。</translation>
    </message>
    <message>
      <source>The speaker "{name}" stopped playing (unplugged?). It will be reopened for the next answer.</source>
      <translation>スピーカー「{name}」の再生が止まりました（抜かれた可能性があります）。次の回答のときに開き直します。</translation>
    </message>
    <message>
      <source>The recording is empty.</source>
      <translation>録音が空です。</translation>
    </message>
    <message>
      <source>The recording is too short ({seconds} s; at least {minimum} s is needed).</source>
      <translation>録音が短すぎます（{seconds} 秒。{minimum} 秒以上必要です）。</translation>
    </message>
    <message>
      <source>The recording is too long ({seconds} s; at most {maximum} s).</source>
      <translation>録音が長すぎます（{seconds} 秒。最大 {maximum} 秒です）。</translation>
    </message>
    <message>
      <source>The recording contains invalid samples (NaN or infinity).</source>
      <translation>録音に無効なサンプル（NaN または無限大）が含まれています。</translation>
    </message>
    <message>
      <source>{name} must be a whole number from {low} to {high} (got {value}).</source>
      <translation>{name} は {low} から {high} までの整数にしてください（指定された値：{value}）。</translation>
    </message>
    <message>
      <source>{name} must be a number from {low} to {high} (got {value}).</source>
      <translation>{name} は {low} から {high} までの数値にしてください（指定された値：{value}）。</translation>
    </message>
    <message>
      <source>The system prompt must be text.</source>
      <translation>システムプロンプトは文字列にしてください。</translation>
    </message>
    <message>
      <source>The system prompt is too long ({length} characters; at most {limit}).</source>
      <translation>システムプロンプトが長すぎます（{length} 文字。最大 {limit} 文字）。</translation>
    </message>
    <message>
      <source>The system prompt contains a NUL character.</source>
      <translation>システムプロンプトに NUL 文字が含まれています。</translation>
    </message>
    <message>
      <source>The system prompt is too long for the context: {tokens} tokens, at most {limit} fit in a context of {context} tokens. Shorten it or choose a larger context.</source>
      <translation>システムプロンプトがコンテキストに対して長すぎます：{tokens} トークンですが、{context} トークンのコンテキストに入るのは最大 {limit} トークンです。短くするか、より大きなコンテキストを選んでください。</translation>
    </message>
    <message>
      <source>The output file {path} is the input recording; choose another name so the recording is kept.</source>
      <translation>出力ファイル {path} は入力の録音そのものです。録音を残すため、別の名前を指定してください。</translation>
    </message>
    <message>
      <source>The output path {path} is a folder; give a file name.</source>
      <translation>出力先 {path} はフォルダーです。ファイル名を指定してください。</translation>
    </message>
    <message>
      <source>The output path {path} is a link to nothing.</source>
      <translation>出力先 {path} はリンク先のないリンクです。</translation>
    </message>
    <message>
      <source>The output file {path} cannot be created: {parent} is not a folder.</source>
      <translation>出力ファイル {path} を作成できません：{parent} はフォルダーではありません。</translation>
    </message>
    <message>
      <source>The output file {path} cannot be written: {error}</source>
      <translation>出力ファイル {path} に書き込めません。</translation>
    </message>
    <message>
      <source>The output path {path} is not a regular file.</source>
      <translation>出力先 {path} は通常のファイルではありません。</translation>
    </message>
    <message>
      <source>The output file {path} exists and cannot be overwritten.</source>
      <translation>出力ファイル {path} は既に存在し、上書きできません。</translation>
    </message>
    <message>
      <source>The output file {path} cannot be written: the folder {parent} is read-only.</source>
      <translation>出力ファイル {path} に書き込めません：フォルダー {parent} は読み取り専用です。</translation>
    </message>
    <message>
      <source>The answer could not be written to {path} ({error}); it was saved to {saved} instead.</source>
      <translation>応答を {path} に書き込めませんでした。代わりに {saved} に保存しました。</translation>
    </message>
    <message>
      <source>The answer could not be written to {path} ({error}) nor anywhere else.</source>
      <translation>応答を {path} にも他の場所にも書き込めませんでした。</translation>
    </message>
    <message>
      <source>The settings file {path} is a link to a missing file. It was moved to {moved}. Default settings are used.</source>
      <translation>設定ファイル {path} は存在しないファイルへのリンクです。{moved} に移動しました。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} is a link to a missing file. Default settings are used.</source>
      <translation>設定ファイル {path} は存在しないファイルへのリンクです。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} is too large ({size} bytes; at most {limit}). It was moved to {moved}. Default settings are used.</source>
      <translation>設定ファイル {path} が大きすぎます（{size} バイト。最大 {limit} バイト）。{moved} に移動しました。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} is too large ({size} bytes; at most {limit}). Default settings are used.</source>
      <translation>設定ファイル {path} が大きすぎます（{size} バイト。最大 {limit} バイト）。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} is not UTF-8 text (byte {position}). It was moved to {moved}. Default settings are used.</source>
      <translation>設定ファイル {path} は UTF-8 のテキストではありません（{position} バイト目）。{moved} に移動しました。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} is not UTF-8 text (byte {position}). Default settings are used.</source>
      <translation>設定ファイル {path} は UTF-8 のテキストではありません（{position} バイト目）。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} was corrupt ({error}). It was moved to {moved}. Default settings are used.</source>
      <translation>設定ファイル {path} が壊れていました。{moved} に移動しました。既定の設定を使います。</translation>
    </message>
    <message>
      <source>The settings file {path} was corrupt ({error}). Default settings are used.</source>
      <translation>設定ファイル {path} が壊れていました。既定の設定を使います。</translation>
    </message>
    <message>
      <source>Some settings in {path} were invalid and were reset to their defaults: {fields}. The original file was kept as {moved}.</source>
      <translation>{path} の一部の設定が無効だったため、既定値に戻しました：{fields}。元のファイルは {moved} として残してあります。</translation>
    </message>
    <message>
      <source>Some settings in {path} were invalid and were reset to their defaults: {fields}.</source>
      <translation>{path} の一部の設定が無効だったため、既定値に戻しました：{fields}。</translation>
    </message>
    <message>
      <source>The settings file {path} could not be read ({error}). Default settings are used.</source>
      <translation>設定ファイル {path} を読み込めませんでした。既定の設定を使います。</translation>
    </message>
    <message>
      <source>{file} does not hold a JSON object.</source>
      <translation>{file} は JSON オブジェクトではありません。</translation>
    </message>
    <message>
      <source>{voice} uses {option}, which a plain LoRA merge does not support.</source>
      <translation>{voice} は {option} を使っていますが、通常の LoRA の統合では対応していません。</translation>
    </message>
    <message>
      <source>{voice}: {field} in adapter_config.json must be a whole number from 1 to {high} (it is {value}).</source>
      <translation>{voice}：adapter_config.json の {field} は 1 から {high} までの整数にしてください（現在の値：{value}）。</translation>
    </message>
    <message>
      <source>{voice}: {field} in adapter_config.json must be a finite number (it is {value}).</source>
      <translation>{voice}：adapter_config.json の {field} は有限の数値にしてください（現在の値：{value}）。</translation>
    </message>
    <message>
      <source>{voice}: {field} in adapter_config.json must be true or false (it is {value}).</source>
      <translation>{voice}：adapter_config.json の {field} は true か false にしてください（現在の値：{value}）。</translation>
    </message>
    <message>
      <source>{voice}: {field} in adapter_config.json must be a model name (it is {value}).</source>
      <translation>{voice}：adapter_config.json の {field} はモデル名にしてください（現在の値：{value}）。</translation>
    </message>
    <message>
      <source>{voice}: {field} in adapter_config.json must be an object of module names and numbers (it is {value}).</source>
      <translation>{voice}：adapter_config.json の {field} はモジュール名と数値のオブジェクトにしてください（現在の値：{value}）。</translation>
    </message>
    <message>
      <source>{voice}: {key} is not a matrix of numbers ({shape}, {dtype}).</source>
      <translation>{voice}：{key} は数値の行列ではありません（{shape}、{dtype}）。</translation>
    </message>
    <message>
      <source>{voice}: {key} holds NaN or infinite values; the voice is damaged.</source>
      <translation>{voice}：{key} に NaN または無限大の値が含まれています。声のデータが壊れています。</translation>
    </message>
    <message>
      <source>{voice}: module {module} has rank {rank} in adapter_config.json, but its lora_A is {a_shape} and lora_B is {b_shape}.</source>
      <translation>{voice}：adapter_config.json ではモジュール {module} のランクは {rank} ですが、lora_A は {a_shape}、lora_B は {b_shape} です。</translation>
    </message>
    <message>
      <source>{voice} would change {module} by up to {bound}, far beyond what a trained voice does; check lora_alpha and the weights.</source>
      <translation>{voice} は {module} を最大 {bound} も変えてしまいます。学習済みの声ではありえない大きさです。lora_alpha と重みを確認してください。</translation>
    </message>
    <message>
      <source>{file}: {key} must be one of {choices} (it is {value})</source>
      <translation>{file}：{key} は {choices} のいずれかにしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be true or false (it is {value})</source>
      <translation>{file}：{key} は true か false にしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be a whole number (it is {value})</source>
      <translation>{file}：{key} は整数にしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be a number (it is {value})</source>
      <translation>{file}：{key} は数値にしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be text (it is {value})</source>
      <translation>{file}：{key} は文字列にしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be a list (it is {value})</source>
      <translation>{file}：{key} はリストにしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be from {low} to {high} (it is {value})</source>
      <translation>{file}：{key} は {low} から {high} までにしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be an object (it is {value})</source>
      <translation>{file}：{key} はオブジェクトにしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} must be {expected} (it is {value})</source>
      <translation>{file}：{key} は {expected} にしてください（現在の値：{value}）</translation>
    </message>
    <message>
      <source>{file}: {key} has {count} entries, but {layers_key} is {layers}</source>
      <translation>{file}：{key} の項目数は {count} ですが、{layers_key} は {layers} です</translation>
    </message>
    <message>
      <source>the tokenizer ({files}) cannot be loaded: {error}</source>
      <translation>トークナイザー（{files}）を読み込めません</translation>
    </message>
    <message>
      <source>{path} does not exist.</source>
      <translation>{path} がありません。</translation>
    </message>
    <message>
      <source>{path} is not a file.</source>
      <translation>{path} はファイルではありません。</translation>
    </message>
    <message>
      <source>{path} is not a readable audio file ({error}).</source>
      <translation>{path} は読み込める音声ファイルではありません。</translation>
    </message>
    <message>
      <source>{path} cannot be read ({error}).</source>
      <translation>{path} を読み込めません。</translation>
    </message>
    <message>
      <source>{source} is neither a model folder nor a Hub repo id like {example}.</source>
      <translation>{source} はモデルのフォルダーでも、{example} のような Hub のリポジトリ ID でもありません。</translation>
    </message>
    <message>
      <source>A revision can only be pinned for a Hub repo id, not for a folder.</source>
      <translation>リビジョンを指定できるのは Hub のリポジトリ ID だけで、フォルダーには指定できません。</translation>
    </message>
    <message>
      <source>The GPU ran out of memory while loading the model ({memory}). Close other programs that use the GPU, or use a GPU with more memory.</source>
      <translation>モデルの読み込み中に GPU メモリーが足りなくなりました（{memory}）。GPU を使うほかのプログラムを閉じるか、メモリーの多い GPU を使ってください。</translation>
    </message>
    <message>
      <source>The GPU does not have enough free memory for the model: it needs about {needed} GB ({weights} GB of weights and {runtime} GB to run), but only {free} GB of {total} GB are free. Close programs that use the GPU (games, video, browsers with hardware acceleration), or use a GPU with more memory.</source>
      <translation>GPU の空きメモリーがモデルに足りません。約 {needed} GB（重み {weights} GB と実行用 {runtime} GB）が必要ですが、空きは {total} GB 中 {free} GB だけです。GPU を使うほかのプログラム（ゲーム、動画、ハードウェアアクセラレーションを使うブラウザーなど）を閉じるか、メモリーの多い GPU を使ってください。</translation>
    </message>
    <message>
      <source>The GPU ran out of memory while preparing the model for real time (it needs about {needed} GB, {free} GB are still free). Close programs that use the GPU, or use a GPU with more memory.</source>
      <translation>モデルをリアルタイム用に準備している途中で GPU メモリーが足りなくなりました（約 {needed} GB が必要で、空きは {free} GB です）。GPU を使うほかのプログラムを閉じるか、メモリーの多い GPU を使ってください。</translation>
    </message>
    <message>
      <source>The GPU has no room to merge the voice {voice}; the previous voice stays. Close other programs that use the GPU and try again.</source>
      <translation>GPU メモリーに声 {voice} を合成する空きがありません。それまでの声のままです。GPU を使うほかのプログラムを閉じてから、もう一度試してください。</translation>
    </message>
    <message>
      <source>{text}</source>
      <translation>{text}</translation>
    </message>
    <message>
      <source>{path} has a sample rate of {rate} Hz; only {low} to {high} Hz are supported.</source>
      <translation>{path} のサンプルレートは {rate} Hz です。対応しているのは {low}～{high} Hz です。</translation>
    </message>
    <message>
      <source>{path} is too long ({seconds} s; at most {maximum} s).</source>
      <translation>{path} が長すぎます（{seconds} 秒。最大 {maximum} 秒）。</translation>
    </message>
    <message>
      <source>A turn cannot be replayed while you are recording.</source>
      <translation>録音中は発言を再生できません。</translation>
    </message>
    <message>
      <source>The recording was lost; press the talk button again.</source>
      <translation>録音が失われました。もう一度トークボタンを押してください。</translation>
    </message>
    <message>
      <source>The output file {path} cannot be written: the folder {folder} does not exist. Check the path, or create the folder first.</source>
      <translation>出力ファイル {path} に書き込めません：フォルダー {folder} がありません。パスを確かめるか、先にフォルダーを作ってください。</translation>
    </message>
    <message>
      <source>Hands-free listening failed.</source>
      <translation>ハンズフリーの聞き取りに失敗しました。</translation>
    </message>
    <message>
      <source>The voice needs the model's bf16 weights for {module}, which are not available.</source>
      <translation>この声には {module} の bf16 の重みが必要ですが、使えません。</translation>
    </message>
    <message>
      <source>int8 was refused for this model on this GPU: its output differs too much from bf16 ({worst}; allowed: KL up to {max_kl}, text top-1 from {text_top1}). Standard precision (bf16) stays.</source>
      <translation>このモデルはこの GPU では int8 にできません。出力が bf16 と違いすぎます（{worst}。許容範囲: KL {max_kl} まで、テキストの top-1 一致 {text_top1} 以上）。標準 (bf16) のままにします。</translation>
    </message>
    <message>
      <source>int8 was refused for this model on this GPU: its audio decoder, which int8 runs in bf16, differs too much from float32 (SNR {snr} dB over {frames} frames; allowed: from {min_snr} dB). Standard precision (bf16) stays.</source>
      <translation>このモデルはこの GPU では int8 にできません。int8 で bf16 にする音声デコーダーの出力が float32 と違いすぎます（{frames} フレームで SNR {snr} dB。許容範囲: {min_snr} dB 以上）。標準 (bf16) のままにします。</translation>
    </message>
    <message>
      <source>int8 needs an NVIDIA GPU: it is checked against bf16 on the GPU, and only the GPU engine runs it faster. Standard precision (bf16) is used.</source>
      <translation>int8 には NVIDIA の GPU が必要です（bf16 との比較は GPU で行い、速くなるのも GPU のエンジンだけです）。標準 (bf16) で読み込みます。</translation>
    </message>
    <message>
      <source>The int8 check could not run ({error}), so standard precision (bf16) stays.</source>
      <translation>int8 の確認を実行できませんでした。標準 (bf16) のままにします。</translation>
    </message>
    <message>
      <source>This GPU has no room for the model in bf16, so int8 could not be checked against it on this card; int8 is used without the check.</source>
      <translation>この GPU には bf16 のモデルを置く空きがないため、int8 を bf16 と比べる確認をこのカードでは実行できませんでした。確認なしで int8 を使います。</translation>
    </message>
    <message>
      <source>The int8 check was stopped; standard precision (bf16) stays.</source>
      <translation>int8 の確認を中止しました。標準 (bf16) のままにします。</translation>
    </message>
    <message>
      <source>No speech was heard in this recording. Check that the right microphone is chosen and not muted, then speak and record again.</source>
      <translation>この録音には声が入っていません。正しいマイクが選ばれていて、ミュートになっていないか確かめてから、もう一度録音してください。</translation>
    </message>
    <message>
      <source>The voice is too quiet ({level} dBFS; at least {minimum} dBFS is needed). Move closer to the microphone or turn its volume up, and record again.</source>
      <translation>声が小さすぎます（{level} dBFS。{minimum} dBFS 以上が必要です）。マイクに近づくか、マイクの音量を上げて、もう一度録音してください。</translation>
    </message>
    <message>
      <source>The sound is distorted: {percent} % of it was louder than the recording can hold. Move a little away from the microphone or turn its volume down, and record again.</source>
      <translation>音が割れています。{percent} % が録音できる大きさを超えていました。マイクから少し離れるか、マイクの音量を下げて、もう一度録音してください。</translation>
    </message>
    <message>
      <source>There is too much background noise: the voice is only {snr} dB above it (at least {minimum} dB is needed). Record in a quieter place, away from fans, air conditioners and traffic.</source>
      <translation>周りの雑音が大きすぎます。声が雑音より {snr} dB しか大きくありません（{minimum} dB 以上が必要です）。扇風機やエアコン、車の音から離れた静かな場所で録音してください。</translation>
    </message>
    <message>
      <source>The speech is too short ({seconds} s; at least {minimum} s is needed). Read the whole sentence, or use a longer piece.</source>
      <translation>声の部分が短すぎます（{seconds} 秒。{minimum} 秒以上が必要です）。文を最後まで読むか、もっと長い部分を使ってください。</translation>
    </message>
    <message>
      <source>The speech is too long ({seconds} s; at most {maximum} s). Split it into shorter sentences.</source>
      <translation>声の部分が長すぎます（{seconds} 秒。最大 {maximum} 秒）。短い文に分けてください。</translation>
    </message>
    <message>
      <source>There is a silence of {seconds} s inside the speech (at most {maximum} s). Read the sentence in one go, without stopping.</source>
      <translation>話の途中に {seconds} 秒の無音があります（最大 {maximum} 秒）。途中で止まらずに、ひと息で読んでください。</translation>
    </message>
    <message>
      <source>{path} is not an audio file (wav, flac, ogg or mp3).</source>
      <translation>{path} は音声ファイル（wav、flac、ogg、mp3）ではありません。</translation>
    </message>
    <message>
      <source>{path} is damaged and cannot be read ({error}).</source>
      <translation>{path} は壊れているため読み込めません（{error}）。</translation>
    </message>
    <message>
      <source>{path} is empty: it holds no audio.</source>
      <translation>{path} は空です。音声が入っていません。</translation>
    </message>
    <message>
      <source>{path} is damaged: it holds invalid samples (NaN or infinity).</source>
      <translation>{path} は壊れています。不正なサンプル（NaN または無限大）が含まれています。</translation>
    </message>
    <message>
      <source>{path} is too long ({minutes} minutes; at most {maximum} minutes a file). Split it into shorter files.</source>
      <translation>{path} は長すぎます（{minutes} 分。1 ファイル最大 {maximum} 分）。短いファイルに分けてください。</translation>
    </message>
    <message>
      <source>{path} is neither UTF-8 nor Shift_JIS text. Save it as UTF-8 and scan again.</source>
      <translation>{path} は UTF-8 でも Shift_JIS でもないテキストです。UTF-8 で保存してから、もう一度読み込んでください。</translation>
    </message>
    <message>
      <source>The folder {folder} does not exist.</source>
      <translation>フォルダー {folder} がありません。</translation>
    </message>
    <message>
      <source>{folder} is not a folder.</source>
      <translation>{folder} はフォルダーではありません。</translation>
    </message>
    <message>
      <source>The folder {folder} cannot be read ({error}).</source>
      <translation>フォルダー {folder} を読み込めません（{error}）。</translation>
    </message>
    <message>
      <source>The folder {folder} is empty.</source>
      <translation>フォルダー {folder} は空です。</translation>
    </message>
    <message>
      <source>The folder {folder} holds more than {count} files; choose the folder that holds the recordings.</source>
      <translation>フォルダー {folder} には {count} 個を超えるファイルがあります。録音の入ったフォルダーを選んでください。</translation>
    </message>
    <message>
      <source>The folder {folder} holds no audio files (wav, flac, ogg or mp3).</source>
      <translation>フォルダー {folder} には音声ファイル（wav、flac、ogg、mp3）がありません。</translation>
    </message>
    <message>
      <source>The transcript {file} is empty; the model will write one for you to check.</source>
      <translation>文字起こし {file} が空です。モデルが文字起こしを作りますので、確認してください。</translation>
    </message>
    <message>
      <source>{file} has no transcript; the model will write one for you to check.</source>
      <translation>{file} には文字起こしがありません。モデルが文字起こしを作りますので、確認してください。</translation>
    </message>
    <message>
      <source>{file} is longer than {maximum} s, so it was split at its pauses into {count} pieces; the model will write their transcripts for you to check.</source>
      <translation>{file} は {maximum} 秒より長いので、話の切れ目で {count} 個に分けました。それぞれの文字起こしはモデルが作りますので、確認してください。</translation>
    </message>
    <message>
      <source>Line {line} of {file} is not in the form file|text and was skipped: {text}</source>
      <translation>{file} の {line} 行目は「ファイル|文」の形ではないため、読み飛ばしました: {text}</translation>
    </message>
    <message>
      <source>Line {line} of {file} names {name}, which is not an audio file in the folder.</source>
      <translation>{file} の {line} 行目の {name} は、フォルダー内の音声ファイルではありません。</translation>
    </message>
    <message>
      <source>Line {line} of {file} lists {name} again; the text of line {first} is used.</source>
      <translation>{file} の {line} 行目に {name} がもう一度あります。{first} 行目の文を使います。</translation>
    </message>
    <message>
      <source>Line {line} of {file} has no text for {name}; the model will write one for you to check.</source>
      <translation>{file} の {line} 行目には {name} の文がありません。モデルが文字起こしを作りますので、確認してください。</translation>
    </message>
    <message>
      <source>There is no clip {name} in {folder}.</source>
      <translation>{folder} にクリップ {name} はありません。</translation>
    </message>
    <message>
      <source>{file} could not be saved in {folder} ({error}). Free some space on the disk and try again; the clips saved before are kept.</source>
      <translation>{file} を {folder} に保存できませんでした（{error}）。ディスクの空きを増やしてから、もう一度お試しください。これまでに保存したクリップは残っています。</translation>
    </message>
    <message>
      <source>{file} could not be deleted ({error}).</source>
      <translation>{file} を削除できませんでした（{error}）。</translation>
    </message>
    <message>
      <source>{minutes} minutes of speech: too little for a steady voice. Collect at least {minimum} minutes; {low} to {high} minutes are recommended.</source>
      <translation>音声は {minutes} 分です。安定した声にするには少なすぎます。少なくとも {minimum} 分集めてください。{low}〜{high} 分がおすすめです。</translation>
    </message>
    <message>
      <source>{minutes} minutes of speech: enough to train, but {low} to {high} minutes give a steadier voice.</source>
      <translation>音声は {minutes} 分です。学習はできますが、{low}〜{high} 分あると声がより安定します。</translation>
    </message>
    <message>
      <source>{minutes} minutes of speech: a good amount for training.</source>
      <translation>音声は {minutes} 分です。学習にちょうどよい量です。</translation>
    </message>
    <message>
      <source>{minutes} minutes of speech: more than needed. Training takes longer; {low} to {high} minutes are usually enough.</source>
      <translation>音声は {minutes} 分です。必要より多めです。学習に時間がかかります。ふつうは {low}〜{high} 分で十分です。</translation>
    </message>
    <message>
      <source>{count} clips have no transcript: {names}. Write their text in the wizard or in the list file, or remove them.</source>
      <translation>{count} 個のクリップに文字起こしがありません: {names}。ウィザードかリストファイルで文を書き込むか、そのクリップを削除してください。</translation>
    </message>
    <message>
      <source>{count} clips have no transcript: {names} and {more} more. Write their text in the wizard or in the list file, or remove them.</source>
      <translation>{count} 個のクリップに文字起こしがありません: {names} ほか {more} 個。ウィザードかリストファイルで文を書き込むか、そのクリップを削除してください。</translation>
    </message>
    <message>
      <source>No clip in {folder} can be used for training: all {count} were left out. The first, {name}: {reason}</source>
      <translation>{folder} には学習に使えるクリップがありません。{count} 個すべてが除外されました。最初のもの、{name}: {reason}</translation>
    </message>
    <message>
      <source>--resume and --replace cannot be given together: resume goes on with the run in {folder}.</source>
      <translation>--resume と --replace は同時に指定できません。--resume は {folder} の学習の続きを行います。</translation>
    </message>
    <message>
      <source>--resume goes on with the run's own settings: leave out --steps and --rank.</source>
      <translation>--resume はその学習の設定のまま続けます。--steps と --rank は指定しないでください。</translation>
    </message>
    <message>
      <source>A voice is already training; wait for it to end or stop it first.</source>
      <translation>すでに声の学習が実行中です。終わるまで待つか、先に停止してください。</translation>
    </message>
    <message>
      <source>Downloading {file} of {source} failed: {error}</source>
      <translation>{source} の {file} をダウンロードできませんでした: {error}</translation>
    </message>
    <message>
      <source>Load a model first: a voice is trained on the model the app talks with.</source>
      <translation>先にモデルを読み込んでください。声は、アプリが会話に使うモデルの上で学習します。</translation>
    </message>
    <message>
      <source>Load a model to transcribe clips: the model itself hears them.</source>
      <translation>文字起こしにはモデルの読み込みが必要です (モデル自身が音声を聞き取ります)。</translation>
    </message>
    <message>
      <source>The GPU ran out of memory while training the voice (step {step}); the last checkpoint is kept. Close programs that use the GPU, or train with the int8 base, and resume.</source>
      <translation>声の学習中に GPU のメモリーが足りなくなりました (ステップ {step})。最後のチェックポイントは残っています。GPU を使うプログラムを閉じるか、int8 のベースで学習して、続きから再開してください。</translation>
    </message>
    <message>
      <source>The checkpoint in {folder} is damaged ({error}); train again into a new folder.</source>
      <translation>{folder} のチェックポイントが壊れています ({error})。新しいフォルダーにもう一度学習してください。</translation>
    </message>
    <message>
      <source>The model folder {folder} has no audio tokenizer ({file}), which training needs to turn speech into the model's audio codes. Download the model again (the app fetches the file) or copy the file into the folder.</source>
      <translation>モデルのフォルダー {folder} に音声トークナイザー ({file}) がありません。学習では、音声をモデルの音声コードに変換するために必要です。モデルをもう一度ダウンロードする (アプリがこのファイルを取得します) か、ファイルをフォルダーにコピーしてください。</translation>
    </message>
    <message>
      <source>The model is not loaded; load it to plan or start a training.</source>
      <translation>モデルが読み込まれていません。学習の見積もりや開始には、モデルを読み込んでください。</translation>
    </message>
    <message>
      <source>The run in {folder} was started with other clips or settings, so it cannot be resumed. Resume it with the same data and settings, or train into a new folder.</source>
      <translation>{folder} の学習は別の音声または設定で始められたため、再開できません。同じデータと設定で再開するか、新しいフォルダーに学習してください。</translation>
    </message>
    <message>
      <source>The speech folder {folder} does not exist.</source>
      <translation>音声のフォルダー {folder} がありません。</translation>
    </message>
    <message>
      <source>The training could not be started: {error}</source>
      <translation>学習を開始できませんでした: {error}</translation>
    </message>
    <message>
      <source>The voice could not be written to {file}: {error}</source>
      <translation>声を {file} に書き出せませんでした: {error}</translation>
    </message>
    <message>
      <source>The voice in {file} could not be imported: {error}</source>
      <translation>{file} の声を取り込めませんでした: {error}</translation>
    </message>
    <message>
      <source>There are no clips to train on.</source>
      <translation>学習に使える音声がありません。</translation>
    </message>
    <message>
      <source>There is no unfinished training in {folder} to resume.</source>
      <translation>{folder} には再開できる途中の学習がありません。</translation>
    </message>
    <message>
      <source>This GPU cannot train a voice: it needs about {need} GB, and {free} GB are free even without the chat model. Choose the int8 base, or close programs that use the GPU.</source>
      <translation>この GPU では声を学習できません。約 {need} GB が必要ですが、会話のモデルを外しても空きは {free} GB です。int8 のベースを選ぶか、GPU を使うプログラムを閉じてください。</translation>
    </message>
    <message>
      <source>This GPU has {free} GB free, but training a voice with the bf16 base needs about {need} GB. Close programs that use the GPU, or choose the int8 base.</source>
      <translation>この GPU の空きは {free} GB ですが、bf16 のベースで声を学習するには約 {need} GB が必要です。GPU を使うプログラムを閉じるか、int8 のベースを選んでください。</translation>
    </message>
    <message>
      <source>This GPU has {free} GB free, but training a voice needs about {need} GB even with the int8 base. Close programs that use the GPU.</source>
      <translation>この GPU の空きは {free} GB ですが、int8 のベースでも声の学習には約 {need} GB が必要です。GPU を使うプログラムを閉じてください。</translation>
    </message>
    <message>
      <source>{file} cannot be played: {error}</source>
      <translation>{file} を再生できません: {error}</translation>
    </message>
    <message>
      <source>{file} holds a file too large for a voice.</source>
      <translation>{file} には声としては大きすぎるファイルが入っています。</translation>
    </message>
    <message>
      <source>{file} holds files a voice does not have ({names}).</source>
      <translation>{file} には声にないファイルが入っています ({names})。</translation>
    </message>
    <message>
      <source>{file} holds no voice ({names} missing).</source>
      <translation>{file} に声が入っていません ({names} がありません)。</translation>
    </message>
    <message>
      <source>{file} is not a voice file (a zip with a voice inside): {error}</source>
      <translation>{file} は声のファイル (声が入った zip) ではありません: {error}</translation>
    </message>
    <message>
      <source>{folder} already holds a voice. Choose another folder, or confirm that the new voice replaces it.</source>
      <translation>{folder} にはすでに声があります。別のフォルダーを選ぶか、新しい声で置き換えることを確認してください。</translation>
    </message>
    <message>
      <source>{folder} holds an unfinished training. Resume it, or choose another folder for a new voice.</source>
      <translation>{folder} には途中の学習があります。再開するか、新しい声には別のフォルダーを選んでください。</translation>
    </message>
    <message>
      <source>{folder} is a file, not a folder.</source>
      <translation>{folder} はフォルダーではなくファイルです。</translation>
    </message>
    <message>
      <source>A voice is training and has the GPU; the conversation goes on when the training ends (or stop the training).</source>
      <translation>声の学習が GPU を使っています。学習が終わると (または学習を止めると) 会話を続けられます。</translation>
    </message>
    <message>
      <source>The training process stopped unexpectedly (status {status}); the last checkpoint is kept. {detail}</source>
      <translation>学習のプロセスが予期せず終了しました (状態 {status})。最後のチェックポイントは残っています。{detail}</translation>
    </message>
    <message>
      <source>The conversation goes on, but the model starts without its memory of it: it was not saved in the history.</source>
      <translation>会話は続けられますが、モデルはそれまでのやり取りを覚えていません (履歴に保存されていなかったため)。</translation>
    </message>
    <message>
      <source>Echo cancellation may be unreliable: "{name}" is used through {host_api}, which gives no capture timing. Choose its WASAPI entry in the settings if there is one.</source>
      <translation>エコー除去がうまく働かないかもしれません:「{name}」は {host_api} 経由で使われていて、録音のタイミング情報がありません。設定で同じ機器の WASAPI の項目があればそちらを選んでください。</translation>
    </message>
    <message>
      <source>Echo cancellation may be unreliable: the microphone "{input}" and the speaker "{output}" are different devices with clocks of their own. Headphones, or a headset's own microphone and speaker, work best.</source>
      <translation>エコー除去がうまく働かないかもしれません: マイク「{input}」とスピーカー「{output}」はそれぞれ別のクロックで動く別の機器です。ヘッドホン、またはヘッドセットのマイクとスピーカーの組み合わせがいちばん確実です。</translation>
    </message>
    <message>
      <source>Echo cancellation may be unreliable over Bluetooth ("{name}"): its delay varies. Wired headphones work best.</source>
      <translation>Bluetooth(「{name}」)では遅れが変動するため、エコー除去がうまく働かないかもしれません。有線のヘッドホンがいちばん確実です。</translation>
    </message>
    <message>
      <source>Echo cancellation may be unreliable: "{name}" buffers {ms} ms of sound. Choose another device or driver with less delay.</source>
      <translation>エコー除去がうまく働かないかもしれません:「{name}」は音を {ms} ミリ秒ためてから流します。遅れの少ない別の機器かドライバーを選んでください。</translation>
    </message>
  </context>
  <context>
    <name>FirstRunDialog</name>
    <message>
      <location filename="../first_run.py" line="41" />
      <source>Choose a model</source>
      <translation>モデルの選択</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="47" />
      <source>No speech model found</source>
      <translation>音声モデルが見つかりません</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="48" />
      <source>VoiceChat needs the LFM2.5-Audio-1.5B-JP model (about 3 GB). Choose how to get it:</source>
      <translation>LFM2.5-Audio-1.5B-JP モデル（約 3 GB）が必要です。入手方法を選んでください：</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="55" />
      <source>Resume the download</source>
      <translation>ダウンロードを再開</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="55" />
      <source>Download from Hugging Face Hub</source>
      <translation>Hugging Face Hub からダウンロード</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="59" />
      <source>Not available: offline mode is on (HF_HUB_OFFLINE).</source>
      <translation>利用できません：オフラインモードです（HF_HUB_OFFLINE）。</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="62" />
      <source>%1 — shows progress and can be cancelled; after an interruption the finished files are kept.</source>
      <translation>%1 — 進捗を表示し、キャンセルできます。中断しても、ダウンロード済みのファイルは残ります。</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="65" />
      <source>Use a model folder on this computer</source>
      <translation>このコンピューター上のモデルフォルダーを使う</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="66" />
      <source>A folder that already contains the model files.</source>
      <translation>モデルファイルが入っているフォルダーを選びます。</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="68" />
      <source>Demo model (random weights — answers are noise)</source>
      <translation>デモモデル（ランダムな重み — 応答はノイズです）</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="70" />
      <source>A tiny model with random weights, for checking the app, the microphone and the speakers. It does not understand speech; its answers are noise and random text.</source>
      <translation>アプリ・マイク・スピーカーの動作確認用の、ランダムな重みの小さなモデルです。音声は理解せず、応答はノイズとでたらめなテキストです。</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="73" />
      <source>Quit</source>
      <translation>終了</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="94" />
      <source>Starting…</source>
      <translation>開始しています…</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="98" />
      <source>You can cancel or close the app at any time: the files already downloaded are kept, and the next download fetches the rest.</source>
      <translation>いつでもキャンセルやアプリの終了ができます。ダウンロード済みのファイルは残り、次回は残りのファイルだけをダウンロードします。</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="101" />
      <source>Cancel download</source>
      <translation>ダウンロードをキャンセル</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="129" />
      <source>Downloading %1</source>
      <translation>%1 をダウンロード中</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="145" />
      <source>%1 of %2</source>
      <translation>%1 / %2</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="154" />
      <source>Cancelling…</source>
      <translation>キャンセルしています…</translation>
    </message>
    <message>
      <location filename="../first_run.py" line="158" />
      <source>Choose the model folder</source>
      <translation>モデルフォルダーを選択</translation>
    </message>
  </context>
  <context>
    <name>HistoryPanel</name>
    <message>
      <location filename="../widgets/history.py" line="91" />
      <source>No saved conversations yet.</source>
      <translation>保存された会話はありません。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="41" />
      <source>Open</source>
      <translation>開く</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="35" />
      <source>Continue</source>
      <translation>続ける</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="95" />
      <source>Export…</source>
      <translation>エクスポート…</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="96" />
      <source>Delete…</source>
      <translation>削除…</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="97" />
      <source>Delete all…</source>
      <translation>すべて削除…</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="105" />
      <source>Don't save this conversation</source>
      <translation>この会話を保存しない</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="106" />
      <source>Turns from now on are not saved. What is already saved stays (delete it here). A new conversation is saved again.</source>
      <translation>これ以降の発言は保存されません。すでに保存された分は残ります（ここで削除できます）。新しい会話は再び保存されます。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="112" />
      <source>Forever</source>
      <translation>無期限</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="112" />
      <source>%1 days</source>
      <translation>%1 日</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="115" />
      <source>No limit</source>
      <translation>制限なし</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="132" />
      <source>Keep conversations</source>
      <translation>会話の保存期間</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="133" />
      <source>At most</source>
      <translation>最大サイズ</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="159" />
      <source>History on disk: %1</source>
      <translation>履歴のディスク使用量：%1</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="163" />
      <source>(no text)</source>
      <translation>（テキストなし）</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="165" />
      <source> (this conversation)</source>
      <translation>（この会話）</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="166" />
      <source>%1 turns · %2 · %3</source>
      <translation>発言 %1 件 · %2 · %3</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="210" />
      <source>The disk is full: saving is paused and resumes when there is room.</source>
      <translation>ディスクがいっぱいのため保存を一時停止しています。空きができしだい再開します。</translation>
    </message>
  </context>
  <context>
    <name>HistoryUi</name>
    <message>
      <source>several voices</source>
      <translation>複数の声</translation>
    </message>
    <message>
      <source>default voice</source>
      <translation>標準の声</translation>
    </message>
    <message>
      <source>The conversation in progress is deleted too: it is cleared from the window, and the model starts afresh.</source>
      <translation>進行中の会話も削除されます。画面から消え、モデルは最初からやり直します。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="374" />
      <source>This conversation is not saved. Continuing the other one closes it for good.</source>
      <translation>この会話は保存されていません。別の会話を続けると、この会話は失われます。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="96" />
      <source>Continue</source>
      <translation>続ける</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="6" />
      <source>History</source>
      <translation>履歴</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="344" />
      <source>The saved conversation goes on from here.</source>
      <translation>ここから保存された会話の続きです。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="346" />
      <source>It is longer than the model's context: the %1 oldest turns are not in the model's memory (they stay here and in exports).</source>
      <translation>モデルのコンテキストに収まらないため、古い発言 %1 件はモデルの記憶に入っていません（こことエクスポートには残ります）。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="350" />
      <source>%1 exchanges could not be given back to the model (a recording is missing, or an answer was never finished); they are shown only.</source>
      <translation>%1 組のやり取りはモデルに戻せませんでした（録音がないか、応答が最後まで終わっていないため）。表示のみです。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="338" />
      <source>Saving resumed: the turns since the disk was full are saved too.</source>
      <translation>保存を再開しました。ディスクがいっぱいだった間の発言も保存されました。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="386" />
      <source>Delete the conversation %1? Its recordings and answers are deleted for good.</source>
      <translation>会話「%1」を削除しますか？録音と応答は完全に削除されます。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="390" />
      <source>Delete all %1 saved conversations? Their recordings and answers are deleted for good.</source>
      <translation>保存された %1 件の会話をすべて削除しますか？録音と応答は完全に削除されます。</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="36" />
      <source>Delete</source>
      <translation>削除</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="278" />
      <source>The audio of this turn is missing.</source>
      <translation>この発言の音声ファイルが見つかりません。</translation>
    </message>
  </context>
  <context>
    <name>HistoryViewer</name>
    <message>
      <location filename="../widgets/history.py" line="229" />
      <source>← Back to the conversation</source>
      <translation>← 会話に戻る</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="230" />
      <source>Continue this conversation</source>
      <translation>この会話を続ける</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="95" />
      <source>Export…</source>
      <translation>エクスポート…</translation>
    </message>
    <message>
      <location filename="../widgets/history.py" line="251" />
      <source>&lt;b&gt;Saved conversation&lt;/b&gt; of %1 · model %2 · voice %3</source>
      <translation>&lt;b&gt;保存された会話&lt;/b&gt;（%1）· モデル %2 · 声 %3</translation>
    </message>
  </context>
  <context>
    <name>LatencyMeter</name>
    <message>
      <location filename="../widgets/latency.py" line="103" />
      <source>Since release</source>
      <translation>ボタンを離してから</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="103" />
      <source>This turn</source>
      <translation>今回</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="103" />
      <source>p50</source>
      <translation>p50</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="103" />
      <source>p95</source>
      <translation>p95</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="126" />
      <source>Audio encoded</source>
      <translation>音声エンコード完了</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="127" />
      <source>Prefill done</source>
      <translation>プリフィル完了</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="128" />
      <source>First text</source>
      <translation>最初のテキスト</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="129" />
      <source>First audio frame</source>
      <translation>最初の音声フレーム</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="130" />
      <source>First sample audible</source>
      <translation>最初の音が聞こえる</translation>
    </message>
    <message>
      <location filename="../widgets/latency.py" line="164" />
      <source>Turns measured: %1</source>
      <translation>計測した応答の数：%1</translation>
    </message>
    <message>
      <source> (the last answer was stopped and is not counted)</source>
      <translation>（最後の回答は停止されたため数えていません）</translation>
    </message>
    <message>
      <source>Playback underruns: %1 this turn, %2 in this conversation</source>
      <translation>再生の途切れ：今回 %1 回、この会話で %2 回</translation>
    </message>
    <message>
      <source>How often the speaker ran out of audio because the answer was generated slower than it played (heard as gaps).</source>
      <translation>回答の生成が再生に追いつかず、スピーカーに送る音声が尽きた回数です（音の途切れとして聞こえます）。</translation>
    </message>
    <message>
      <source>End-of-speech wait</source>
      <translation>話し終わりの待ち時間</translation>
    </message>
    <message>
      <source>Since you stopped speaking</source>
      <translation>話し終えてから</translation>
    </message>
  </context>
  <context>
    <name>LevelMeter</name>
    <message>
      <location filename="../widgets/meters.py" line="108" />
      <source>Input level: %1 dBFS (peak %2 dBFS)</source>
      <translation>入力レベル：%1 dBFS（ピーク %2 dBFS）</translation>
    </message>
  </context>
  <context>
    <name>MainWindow</name>
    <message>
      <location filename="../main_window.py" line="92" />
      <source>VoiceChat — Japanese voice chat</source>
      <translation>VoiceChat — 日本語音声チャット</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="102" />
      <source>Settings problem: %1</source>
      <translation>設定の問題：%1</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="107" />
      <source>Conversation</source>
      <translation>会話</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="111" />
      <source>Settings…</source>
      <translation>設定…</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="114" />
      <source>Stop answer</source>
      <translation>応答を停止</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="117" />
      <source>New conversation</source>
      <translation>新しい会話</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="120" />
      <source>Export…</source>
      <translation>エクスポート…</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="142" />
      <source>Latency</source>
      <translation>レイテンシ</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="155" />
      <source>Microphone</source>
      <translation>マイク</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="216" />
      <source>The settings could not be saved: %1</source>
      <translation>設定を保存できませんでした：%1</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="248" />
      <source>No model is loaded.</source>
      <translation>モデルが読み込まれていません。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="249" />
      <source>Choose a model…</source>
      <translation>モデルを選択…</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="339" />
      <source>The engine was restarted; earlier turns cannot be replayed or exported, and the model does not remember them.</source>
      <translation>エンジンを再起動しました。これより前の発言は再生・エクスポートできず、モデルも覚えていません。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="391" />
      <source>The context was full: the %1 oldest turns were dropped from the model's memory (they stay in this transcript and in exports).</source>
      <translation>コンテキストがいっぱいになったため、古い発言 %1 件をモデルの記憶から外しました（この履歴とエクスポートには残ります）。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="410" />
      <source>Download cancelled. The files already downloaded are kept for next time.</source>
      <translation>ダウンロードをキャンセルしました。ダウンロード済みのファイルは次回もそのまま使われます。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="413" />
      <source>Conversation exported: %1</source>
      <translation>会話をエクスポートしました：%1</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="422" />
      <source>That take was too long and was cut at %1 s.</source>
      <translation>録音が長すぎるため %1 秒で切りました。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="469" />
      <location filename="../main_window.py" line="484" />
      <source>Restart engine</source>
      <translation>エンジンを再起動</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="482" />
      <source>Engine stopped</source>
      <translation>エンジン停止</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="483" />
      <source>The engine stopped: %1</source>
      <translation>エンジンが停止しました：%1</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="500" />
      <source>No CUDA graphs: %1</source>
      <translation>CUDA グラフなし：%1</translation>
    </message>
    <message>
      <source>The push-to-talk key cannot work outside this window on this system. It works while VoiceChat is the active window.</source>
      <translation>このシステムでは、プッシュトゥトークのキーをこのウィンドウの外で使えません。VoiceChat がアクティブなウィンドウのときは使えます。</translation>
    </message>
    <message>
      <source>Japanese voice chat</source>
      <translation>日本語音声チャット</translation>
    </message>
    <message>
      <source>No microphone found</source>
      <translation>マイクが見つかりません</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="431" />
      <source>The new system prompt applies after this answer.</source>
      <translation>新しいシステムプロンプトはこの応答の後に適用されます。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="433" />
      <source>The new voice applies after this answer.</source>
      <translation>新しい声はこの応答の後に適用されます。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="435" />
      <source>The model is loaded after this answer.</source>
      <translation>モデルはこの応答の後に読み込まれます。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="437" />
      <source>The new audio devices apply after this answer.</source>
      <translation>新しいオーディオデバイスはこの応答の後に適用されます。</translation>
    </message>
    <message>
      <location filename="../main_window.py" line="513" />
      <source>The engine has not responded for %1 s. You can wait, or restart it (the conversation is lost).</source>
      <translation>エンジンが %1 秒間応答していません。待つか、再起動できます（会話は失われます）。</translation>
    </message>
    <message>
      <source>That take was too short: the button was held for only %1 s. Hold it for as long as you speak.</source>
      <translation>録音が短すぎました（ボタンを押していたのは %1 秒だけです）。話している間はボタンを押し続けてください。</translation>
    </message>
    <message>
      <source>Hands-free</source>
      <translation>ハンズフリー</translation>
    </message>
    <message>
      <source>Talk without holding the button: the app listens, answers when you pause, and stops its answer when you speak.</source>
      <translation>ボタンを押さずに話せます。アプリが聞き取り、話し終えると答え、答えの途中で話すと答えを止めます。</translation>
    </message>
    <message>
      <source>Mute microphone</source>
      <translation>マイクをミュート</translation>
    </message>
    <message>
      <source>Hands-free is on: just speak. Holding the button still records a take.</source>
      <translation>ハンズフリーがオンです。そのまま話してください。ボタンを押している間の録音もできます。</translation>
    </message>
    <message>
      <source>Hands-free waits for the model</source>
      <translation>ハンズフリーはモデルの読み込みを待っています</translation>
    </message>
    <message>
      <source>The mute key cannot work outside this window on this system. It works while VoiceChat is the active window.</source>
      <translation>このシステムでは、ミュートのキーをこのウィンドウの外で使えません。VoiceChat がアクティブなウィンドウのときは使えます。</translation>
    </message>
  </context>
  <context>
    <name>MessageBanner</name>
    <message>
      <location filename="../widgets/banner.py" line="34" />
      <source>Dismiss</source>
      <translation>閉じる</translation>
    </message>
  </context>
  <context>
    <name>PttButton</name>
    <message>
      <location filename="../widgets/ptt.py" line="57" />
      <source>Recording… release to send</source>
      <translation>録音中… 離すと送信</translation>
    </message>
    <message>
      <location filename="../widgets/ptt.py" line="60" />
      <source>Hold to talk (%1)</source>
      <translation>押して話す（%1）</translation>
    </message>
    <message>
      <source>Opening the microphone…</source>
      <translation>マイクを準備中…</translation>
    </message>
  </context>
  <context>
    <name>RtfReadout</name>
    <message>
      <location filename="../widgets/meters.py" line="166" />
      <source>Real-time factor: generation time divided by the length of the audio. Below 1.0 the answer is generated faster than it is spoken.</source>
      <translation>リアルタイム係数：生成時間 ÷ 音声の長さ。1.0 未満なら話すより速く生成できています。</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="173" />
      <source>RTF —</source>
      <translation>RTF —</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="182" />
      <source>RTF %1</source>
      <translation>RTF %1</translation>
    </message>
    <message>
      <source>RTF — (stopped)</source>
      <translation>RTF —（停止）</translation>
    </message>
  </context>
  <context>
    <name>SettingsDialog</name>
    <message>
      <source>Changing the model, the precision or the context size loads the model again and starts a new conversation.</source>
      <translation>モデル・精度・コンテキストサイズを変えると、モデルを読み込み直して新しい会話を始めます。</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="41" />
      <source>Settings</source>
      <translation>設定</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="45" />
      <source>Conversation</source>
      <translation>会話</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="46" />
      <source>Audio</source>
      <translation>音声</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="47" />
      <source>Model and voice</source>
      <translation>モデルと声</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="61" />
      <source>Decoding</source>
      <translation>デコード</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="62" />
      <source>Sampling (more varied answers)</source>
      <translation>サンプリング（応答に変化がある）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="63" />
      <source>Greedy (always the most likely token; repeatable)</source>
      <translation>グリーディ（常に最も確からしいトークン・再現性あり）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="88" />
      <source>Audio temperature</source>
      <translation>音声の温度</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="89" />
      <source>Audio top-k</source>
      <translation>音声の top-k</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="90" />
      <source>Text temperature</source>
      <translation>テキストの温度</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="91" />
      <source>Text top-k</source>
      <translation>テキストの top-k</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="99" />
      <source>Limits</source>
      <translation>制限</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="103" />
      <source> s</source>
      <translation> 秒</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="108" />
      <source>%1 tokens</source>
      <translation>%1 トークン</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="110" />
      <source>Changing the context size reloads the model.</source>
      <translation>コンテキストサイズを変えるとモデルを読み込み直します。</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="112" />
      <source>Maximum answer length</source>
      <translation>応答の最大の長さ</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="113" />
      <source>Context size</source>
      <translation>コンテキストサイズ</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="115" />
      <source>System prompt</source>
      <translation>システムプロンプト</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="119" />
      <source>Default</source>
      <translation>既定値</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="142" />
      <source>System default</source>
      <translation>システムの既定</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="150" />
      <source>%1 (not connected)</source>
      <translation>%1（未接続）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="157" />
      <source>Automatic (system language)</source>
      <translation>自動（システムの言語）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="163" />
      <source>Microphone</source>
      <translation>マイク</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="164" />
      <source>Speaker</source>
      <translation>スピーカー</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="165" />
      <source>Push-to-talk key</source>
      <translation>プッシュトゥトークのキー</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="166" />
      <source>Language (after restart)</source>
      <translation>言語（再起動後に反映）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="171" />
      <source>Model</source>
      <translation>モデル</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="172" />
      <source>Hugging Face Hub id</source>
      <translation>Hugging Face Hub の ID</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="173" />
      <source>Folder</source>
      <translation>フォルダー</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="174" />
      <source>Demo model (random weights — answers are noise)</source>
      <translation>デモモデル（ランダムな重み — 応答はノイズです）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="182" />
      <location filename="../settings_dialog.py" line="210" />
      <source>Browse…</source>
      <translation>参照…</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="183" />
      <source>Choose the model folder</source>
      <translation>モデルフォルダーを選択</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="185" />
      <source>latest</source>
      <translation>最新</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="199" />
      <source>Revision</source>
      <translation>リビジョン</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="206" />
      <source>Voice (LoRA)</source>
      <translation>声（LoRA）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="207" />
      <source>The model's own voice (no LoRA)</source>
      <translation>モデル本来の声（LoRA なし）</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="209" />
      <source>LoRA adapter folder</source>
      <translation>LoRA アダプターのフォルダー</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="211" />
      <source>Choose the voice folder</source>
      <translation>声のフォルダーを選択</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="220" />
      <source>Switching the voice is done in place, without reloading.</source>
      <translation>声の切り替えは読み込み直さずにその場で行います。</translation>
    </message>
    <message>
      <source>General</source>
      <translation>全般</translation>
    </message>
    <message>
      <source>No microphone was found.</source>
      <translation>マイクが見つかりません。</translation>
    </message>
    <message>
      <source>No speaker was found.</source>
      <translation>スピーカーが見つかりません。</translation>
    </message>
    <message>
      <source>System default (none found)</source>
      <translation>システムの既定（見つかりません）</translation>
    </message>
    <message>
      <source>Connect one; this list is refreshed each time the settings are opened.</source>
      <translation>接続してください。この一覧は設定を開くたびに更新されます。</translation>
    </message>
    <message>
      <source>The key also works in other windows</source>
      <translation>VoiceChat がアクティブでないときもキーを使う</translation>
    </message>
    <message>
      <source>Hold the key while you use another program (a game, a browser) and speak. VoiceChat then watches this key system-wide; the key still reaches the program you are using, so choose one it does not need (e.g. F9 rather than Space).</source>
      <translation>ほかのプログラム（ゲームやブラウザーなど）を使いながら、キーを押して話せます。VoiceChat はこのキーをシステム全体で監視します。キーは使用中のプログラムにも届くので、そのプログラムが使わないキーを選んでください（スペースより F9 など）。</translation>
    </message>
    <message>
      <location filename="../settings_dialog.py" line="145" />
      <source>The system prompt is too long (%1 characters; at most %2).</source>
      <translation>システムプロンプトが長すぎます（%1 文字。最大 %2 文字）。</translation>
    </message>
    <message>
      <source>Hands-free: listen all the time, answer when I pause</source>
      <translation>ハンズフリー: 常に聞き取り、話し終えたら答える</translation>
    </message>
    <message>
      <source>Echo cancellation</source>
      <translation>エコーキャンセル</translation>
    </message>
    <message>
      <source>Echo cancellation keeps the app from hearing its own voice from the speakers. Headphones are still best. With speakers, the first seconds of the first answer teach the echo canceller the room; until then speak louder than the answer to interrupt it.</source>
      <translation>エコーキャンセルで、スピーカーから出るアプリ自身の声を聞き取らないようにします。ヘッドホンがいちばん確実です。スピーカーの場合は、最初の回答の最初の数秒でエコーキャンセラーが部屋の響きを学習します。それまでは、回答を止めるには回答より大きな声で話してください。</translation>
    </message>
    <message>
      <source>Hands-free</source>
      <translation>ハンズフリー</translation>
    </message>
    <message>
      <source>Silence that ends what you say</source>
      <translation>話し終わりとみなす無音の長さ</translation>
    </message>
    <message>
      <source>Shortest speech that counts</source>
      <translation>発話とみなす最短の長さ</translation>
    </message>
    <message>
      <source>The mute key also works in other windows</source>
      <translation>VoiceChat がアクティブでないときもミュートのキーを使う</translation>
    </message>
    <message>
      <source>Mute key (hands-free)</source>
      <translation>ミュートのキー（ハンズフリー）</translation>
    </message>
    <message>
      <source>The push-to-talk key and the mute key cannot be the same key (%1). Choose another mute key.</source>
      <translation>プッシュトゥトークのキーとミュートのキーに同じキー（%1）は使えません。別のキーを選んでください。</translation>
    </message>
    <message>
      <source>Precision</source>
      <translation>精度</translation>
    </message>
    <message>
      <source>Create a voice…</source>
      <translation>声を作る…</translation>
    </message>
    <message>
      <source>My voices</source>
      <translation>作った声</translation>
    </message>
    <message>
      <source>How long you are silent before the answer is heard (it is prepared meanwhile). Go on speaking after a pause and the whole sentence is answered as one.</source>
      <translation>黙ってから答えが聞こえ始めるまでの時間です（答えはその間に準備されます）。間を置いてから話し続けると、文全体にまとめて答えます。</translation>
    </message>
  </context>
  <context>
    <name>StateIndicator</name>
    <message>
      <location filename="../widgets/meters.py" line="47" />
      <source>Loading</source>
      <translation>読み込み中</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="49" />
      <source>Ready</source>
      <translation>待機中</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="51" />
      <source>Recording</source>
      <translation>録音中</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="53" />
      <source>Thinking</source>
      <translation>考え中</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="55" />
      <source>Speaking</source>
      <translation>話し中</translation>
    </message>
    <message>
      <location filename="../widgets/meters.py" line="56" />
      <source>No model</source>
      <translation>モデルなし</translation>
    </message>
    <message>
      <source>Microphone muted</source>
      <translation>マイクはミュート中</translation>
    </message>
    <message>
      <source>Listening</source>
      <translation>聞き取り中</translation>
    </message>
    <message>
      <source>Hearing you</source>
      <translation>あなたの声を聞いています</translation>
    </message>
    <message>
      <source>Training a voice (the conversation pauses)</source>
      <translation>声を学習中（会話は一時停止）</translation>
    </message>
    <message>
      <source>%1 · microphone muted</source>
      <translation>%1・マイクはミュート中</translation>
    </message>
  </context>
  <context>
    <name>TranscriptView</name>
    <message>
      <location filename="../widgets/transcript.py" line="121" />
      <location filename="../widgets/transcript.py" line="186" />
      <source>Hold the button (or the push-to-talk key) and speak.</source>
      <translation>ボタン（またはプッシュトゥトークのキー）を押したまま話してください。</translation>
    </message>
  </context>
  <context>
    <name>UserTakeItem</name>
    <message>
      <location filename="../widgets/transcript.py" line="52" />
      <source>You</source>
      <translation>あなた</translation>
    </message>
    <message>
      <location filename="../widgets/transcript.py" line="54" />
      <source>Voice message, %1 s</source>
      <translation>音声メッセージ %1 秒</translation>
    </message>
  </context>
  <context>
    <name>_Bubble</name>
    <message>
      <location filename="../widgets/transcript.py" line="34" />
      <source>▶ Replay</source>
      <translation>▶ 再生</translation>
    </message>
  </context>
  <context>
    <name>ExportDialog</name>
    <message>
      <location filename="../widgets/export_dialog.py" line="17" />
      <source>Export conversation</source>
      <translation>会話をエクスポート</translation>
    </message>
    <message>
      <location filename="../widgets/export_dialog.py" line="18" />
      <source>WAV audio (*.wav)</source>
      <translation>WAV 音声 (*.wav)</translation>
    </message>
  </context>
  <context>
    <name>SingleInstance</name>
    <message>
      <source>VoiceChat is already running, but its window does not respond. Close it (or end it in the task manager), then start VoiceChat again.</source>
      <translation>VoiceChat はすでに起動していますが、そのウィンドウが応答しません。そのウィンドウを閉じる（またはタスク マネージャーで終了する）と、VoiceChat をもう一度起動できます。</translation>
    </message>
  </context>
  <context>
    <name>QFileDialog</name>
    <message>
      <source>&amp;Look in:</source>
      <translation>場所(&amp;L):</translation>
    </message>
    <message>
      <source>Files of &amp;type:</source>
      <translation>ファイルの種類(&amp;T):</translation>
    </message>
  </context>
  <context>
      <name>Transcript</name>
      <message>
        <source>User</source>
        <translation>ユーザー</translation>
      </message>
      <message>
        <source>Assistant</source>
        <translation>アシスタント</translation>
      </message>
      <message>
        <source>(interrupted)</source>
        <translation>（中断）</translation>
      </message>
      <message>
        <source>(voice, {seconds} s)</source>
        <translation>（音声、{seconds} 秒）</translation>
      </message>
  </context>
  <context>
    <name>PrecisionBox</name>
    <message>
      <source>Standard (bf16)</source>
      <translation>標準 (bf16)</translation>
    </message>
    <message>
      <source>Memory-saving, faster (int8)</source>
      <translation>省メモリ・高速 (int8)</translation>
    </message>
    <message>
      <source>%1 (recommended)</source>
      <translation>%1（推奨）</translation>
    </message>
    <message>
      <source>Changing the precision reloads the model. The first time int8 is chosen for a model, it is checked against bf16 on this GPU, which makes that load longer.</source>
      <translation>精度を変えるとモデルを読み込み直します。モデルごとに初めて int8 を選んだときは、この GPU で bf16 と比べて確認するので、その読み込みは長くなります。</translation>
    </message>
    <message>
      <source>int8 is recommended on this card: it needs about half the memory for the weights and reads about half the bytes per frame.</source>
      <translation>このカードには int8 を推奨します。重みに要るメモリーも、1 フレームごとの読み出し量もほぼ半分になります。</translation>
    </message>
    <message>
      <source>What each costs on this card is shown once a model is loaded.</source>
      <translation>このカードでのそれぞれのコストは、モデルを読み込むと表示されます。</translation>
    </message>
    <message>
      <source>Needs an NVIDIA GPU.</source>
      <translation>NVIDIA の GPU が必要です。</translation>
    </message>
    <message>
      <source>Memory: %1 GB needed, %2 GB free</source>
      <translation>メモリー: 必要 %1 GB / 空き %2 GB</translation>
    </message>
    <message>
      <source>Does not fit on this card: %1 GB needed, %2 GB free</source>
      <translation>このカードには入りません: 必要 %1 GB / 空き %2 GB</translation>
    </message>
    <message>
      <source>1 frame reads %1 GB</source>
      <translation>1 フレームの読み出し %1 GB</translation>
    </message>
    <message>
      <source>1 frame reads %1 GB (%2% of bf16)</source>
      <translation>1 フレームの読み出し %1 GB (bf16 の %2%)</translation>
    </message>
    <message>
      <source>RTF %1 (measured)</source>
      <translation>RTF %1（実測）</translation>
    </message>
    <message>
      <source>RTF about %1 (estimate)</source>
      <translation>RTF 約 %1（推定）</translation>
    </message>
    <message>
      <source> · </source>
      <translation> · </translation>
    </message>
  </context>
  <context>
    <name>EngineProblems</name>
    <message>
      <source>What is wrong: %1</source>
      <translation>問題：%1</translation>
    </message>
    <message>
      <source>Voice</source>
      <translation>声</translation>
    </message>
    <message>
      <source>The folder %1 does not hold a usable model. Choose the folder that holds all of the model's files (config.json, model.safetensors and the others), or download the model.</source>
      <translation>フォルダー「%1」には使えるモデルがありません。モデルのファイル一式（config.json、model.safetensors など）が入ったフォルダーを選ぶか、モデルをダウンロードしてください。</translation>
    </message>
    <message>
      <source>Something went wrong that VoiceChat has no explanation for. Try again; if it happens again, restart the engine (the details and the log file say more).</source>
      <translation>VoiceChat が説明できない問題が起きました。もう一度お試しください。繰り返し起きる場合はエンジンを再起動してください（詳細とログファイルに手がかりがあります）。</translation>
    </message>
    <message>
      <source>Settings…</source>
      <translation>設定…</translation>
    </message>
    <message>
      <source>Settings</source>
      <translation>設定</translation>
    </message>
    <message>
      <source>Restart engine</source>
      <translation>エンジンを再起動</translation>
    </message>
    <message>
      <source>Recording</source>
      <translation>録音</translation>
    </message>
    <message>
      <source>Precision</source>
      <translation>精度</translation>
    </message>
    <message>
      <source>No microphone was found. Connect one, then choose it in Settings.</source>
      <translation>マイクが見つかりません。マイクを接続してから、設定で選んでください。</translation>
    </message>
    <message>
      <source>Model</source>
      <translation>モデル</translation>
    </message>
    <message>
      <source>Internal error</source>
      <translation>内部エラー</translation>
    </message>
    <message>
      <source>History</source>
      <translation>履歴</translation>
    </message>
    <message>
      <source>GPU memory</source>
      <translation>GPU メモリ</translation>
    </message>
    <message>
      <source>Export</source>
      <translation>エクスポート</translation>
    </message>
    <message>
      <source>Details: %1</source>
      <translation>詳細：%1</translation>
    </message>
    <message>
      <source>Audio device</source>
      <translation>オーディオデバイス</translation>
    </message>
  </context>
  <context>
    <name>SettingsFlow</name>
    <message>
      <source>The push-to-talk key and the mute key cannot be the same key (%1). The keys were left as they were.</source>
      <translation>プッシュトゥトークのキーとミュートのキーに同じキー（%1）は使えません。キーは元のままにしました。</translation>
    </message>
    <message>
      <source>The new system prompt starts a new conversation: the model starts afresh, without the current conversation.</source>
      <translation>新しいシステムプロンプトでは新しい会話が始まります。モデルは今の会話を忘れて、最初からやり直します。</translation>
    </message>
    <message>
      <source>The new system prompt starts a new conversation.</source>
      <translation>新しいシステムプロンプトで新しい会話を始めます。</translation>
    </message>
    <message>
      <source>The model was loaded again: a new conversation starts.</source>
      <translation>モデルを読み込み直しました。新しい会話を始めます。</translation>
    </message>
    <message>
      <source>The model is loaded again for the new model, precision or context size, and starts a new conversation: it does not remember the current one.</source>
      <translation>新しいモデル・精度・コンテキストサイズでモデルを読み込み直し、新しい会話を始めます。モデルは今の会話を覚えていません。</translation>
    </message>
    <message>
      <source>The language changes the next time VoiceChat starts.</source>
      <translation>表示言語は次回の起動時に切り替わります。</translation>
    </message>
  </context>
  <context>
    <name>DonePage</name>
    <message>
      <source>%1: trained on %2 min of speech (%3 clips) in %4 steps.</source>
      <translation>%1：%2 分の音声（%3 クリップ）で %4 ステップ学習しました。</translation>
    </message>
    <message>
      <source>&amp;Export…</source>
      <translation>書き出す…(&amp;E)</translation>
    </message>
    <message>
      <source>&amp;Play its preview</source>
      <translation>試し聞き(&amp;P)</translation>
    </message>
    <message>
      <source>&amp;Use this voice</source>
      <translation>この声を使う(&amp;U)</translation>
    </message>
    <message>
      <source>It is in the voice menu (声) from now on, like any other voice.</source>
      <translation>これからは「声」メニューにほかの声と同じように並びます。</translation>
    </message>
    <message>
      <source>Loss on the held-out clips: %1.</source>
      <translation>学習に使っていないクリップでの損失：%1。</translation>
    </message>
    <message>
      <source>Switching to the voice… the status bar shows it once the model speaks with it.</source>
      <translation>声を切り替えています…切り替わるとステータスバーに表示されます。</translation>
    </message>
    <message>
      <source>The voice %1 is in %2.</source>
      <translation>声「%1」は %2 にあります。</translation>
    </message>
    <message>
      <source>The voice is ready</source>
      <translation>声ができました</translation>
    </message>
  </context>
  <context>
    <name>ImportPage</name>
    <message>
      <source>%1 audio files: %2 clips, %3 of them usable (%4 min of speech).</source>
      <translation>音声ファイル %1 個：クリップ %2 個、そのうち使えるのは %3 個（音声 %4 分）です。</translation>
    </message>
    <message>
      <source>%1 clips were imported (%2 min).</source>
      <translation>%1 個のクリップを取り込みました（%2 分）。</translation>
    </message>
    <message>
      <source>%1: %2</source>
      <translation>%1：%2</translation>
    </message>
    <message>
      <source>&amp;Import the checked clips</source>
      <translation>チェックしたクリップを取り込む(&amp;I)</translation>
    </message>
    <message>
      <source>Check</source>
      <translation>チェック</translation>
    </message>
    <message>
      <source>Choose a &amp;folder…</source>
      <translation>フォルダーを選ぶ…(&amp;F)</translation>
    </message>
    <message>
      <source>Choose a folder of audio files (wav, flac, ogg, mp3) with their transcripts: same-name .txt files, or a list file of 'file|text' lines (as GPT-SoVITS and Style-Bert-VITS2 write them). Files without a transcript are transcribed by the model for you to check.</source>
      <translation>音声ファイル（wav・flac・ogg・mp3）と文字起こしの入ったフォルダーを選んでください。文字起こしは同じ名前の .txt ファイルか、「ファイル|テキスト」の行を並べたリストファイル（GPT-SoVITS や Style-Bert-VITS2 の形式）で用意します。文字起こしのないファイルはモデルが書き起こすので、確認してください。</translation>
    </message>
    <message>
      <source>Choose the folder of recordings</source>
      <translation>録音のフォルダーを選ぶ</translation>
    </message>
    <message>
      <source>Copying the clips into the voice's folder…</source>
      <translation>クリップを声のフォルダーにコピーしています…</translation>
    </message>
    <message>
      <source>Done. The transcripts in italics were written by the model: check them here or on the next page.</source>
      <translation>完了しました。斜体の文字起こしはモデルが書いたものです。ここか次のページで確認してください。</translation>
    </message>
    <message>
      <source>File</source>
      <translation>ファイル</translation>
    </message>
    <message>
      <source>Import recordings</source>
      <translation>録音を取り込む</translation>
    </message>
    <message>
      <source>Length</source>
      <translation>長さ</translation>
    </message>
    <message>
      <source>Reading the audio files…</source>
      <translation>音声ファイルを読んでいます…</translation>
    </message>
    <message>
      <source>S&amp;top</source>
      <translation>中止(&amp;T)</translation>
    </message>
    <message>
      <source>Stopped.</source>
      <translation>中止しました。</translation>
    </message>
    <message>
      <source>The model is transcribing the clips without a transcript: %1 of %2.</source>
      <translation>文字起こしのないクリップをモデルが書き起こしています：%2 個中 %1 個。</translation>
    </message>
    <message>
      <source>Transcript</source>
      <translation>文字起こし</translation>
    </message>
    <message>
      <source>Use</source>
      <translation>使う</translation>
    </message>
    <message>
      <source>Written by the model: check it and correct it if needed.</source>
      <translation>モデルが書きました。確認して、必要なら直してください。</translation>
    </message>
    <message>
      <source>good</source>
      <translation>良好</translation>
    </message>
    <message>
      <source>… and %1 more</source>
      <translation>…ほか %1 件</translation>
    </message>
  </context>
  <context>
    <name>LossPlot</name>
    <message>
      <source>Loss curves</source>
      <translation>損失の推移</translation>
    </message>
    <message>
      <source>held-out clips</source>
      <translation>学習に使っていないクリップ</translation>
    </message>
    <message>
      <source>held-out loss at step %1: %2</source>
      <translation>ステップ %1 の検証用クリップの損失：%2</translation>
    </message>
    <message>
      <source>step %1</source>
      <translation>ステップ %1</translation>
    </message>
    <message>
      <source>training</source>
      <translation>学習</translation>
    </message>
    <message>
      <source>training loss at step %1: %2</source>
      <translation>ステップ %1 の学習の損失：%2</translation>
    </message>
  </context>
  <context>
    <name>RecordPage</name>
    <message>
      <source>%1 clips so far. %2</source>
      <translation>ここまでのクリップ：%1 個。%2</translation>
    </message>
    <message>
      <source>Checking the take…</source>
      <translation>録音をチェックしています…</translation>
    </message>
    <message>
      <source>Key: %1</source>
      <translation>キー：%1</translation>
    </message>
    <message>
      <source>Next →</source>
      <translation>次の文 →</translation>
    </message>
    <message>
      <source>Not recorded yet.</source>
      <translation>まだ録音していません。</translation>
    </message>
    <message>
      <source>Nothing was kept: %1 Press Space to try again.</source>
      <translation>保存しませんでした：%1 スペースキーでもう一度録音できます。</translation>
    </message>
    <message>
      <source>Play</source>
      <translation>再生</translation>
    </message>
    <message>
      <source>Read aloud</source>
      <translation>読み上げて録音する</translation>
    </message>
    <message>
      <source>Read each sentence in the voice you want the model to have, in a quiet room. Space starts the recording and stops it; a good take moves on to the next sentence.</source>
      <translation>静かな部屋で、モデルに話してほしい声で一文ずつ読んでください。スペースキーで録音を始め、もう一度押すと止まります。問題のない録音なら次の文に進みます。</translation>
    </message>
    <message>
      <source>Record</source>
      <translation>録音</translation>
    </message>
    <message>
      <source>Recorded: %1.</source>
      <translation>録音済み：%1。</translation>
    </message>
    <message>
      <source>Recording… read the sentence, then press Space.</source>
      <translation>録音中…文を読んだらスペースキーを押してください。</translation>
    </message>
    <message>
      <source>Redo</source>
      <translation>やり直し</translation>
    </message>
    <message>
      <source>Sentence %1 of %2</source>
      <translation>文 %1 / %2</translation>
    </message>
    <message>
      <source>Sentence %1 was saved (%2) and sounds good.</source>
      <translation>文 %1 を保存しました（%2）。問題ありません。</translation>
    </message>
    <message>
      <source>Sentence %1 was saved (%2), but: %3 Press Space to record it again, or go on.</source>
      <translation>文 %1 を保存しましたが（%2）、%3 スペースキーで録り直すか、このまま進んでください。</translation>
    </message>
    <message>
      <source>Skip</source>
      <translation>スキップ</translation>
    </message>
    <message>
      <source>Space</source>
      <translation>スペース</translation>
    </message>
    <message>
      <source>Stop</source>
      <translation>停止</translation>
    </message>
    <message>
      <source>← Previous</source>
      <translation>← 前の文</translation>
    </message>
    <message>
      <source>Microphone</source>
      <translation>マイク</translation>
    </message>
  </context>
  <context>
    <name>ReviewPage</name>
    <message>
      <source>%1 clips have no transcript. Write their text, let the model transcribe them, or remove them.</source>
      <translation>%1 個のクリップに文字起こしがありません。文字を入力するか、モデルに書き起こさせるか、削除してください。</translation>
    </message>
    <message>
      <source>%1 clips, %2 of them usable.</source>
      <translation>クリップ %1 個、そのうち使えるのは %2 個です。</translation>
    </message>
    <message>
      <source>&amp;Play</source>
      <translation>再生(&amp;P)</translation>
    </message>
    <message>
      <source>&amp;Remove</source>
      <translation>削除(&amp;R)</translation>
    </message>
    <message>
      <source>&amp;Transcribe the clips without text</source>
      <translation>文字起こしのないクリップを書き起こす(&amp;T)</translation>
    </message>
    <message>
      <source>Check the speech</source>
      <translation>音声を確認する</translation>
    </message>
    <message>
      <source>Clip</source>
      <translation>クリップ</translation>
    </message>
    <message>
      <source>Every clip the voice is trained on. Correct a transcript by editing it (F2), play a clip, or remove the ones you do not want.</source>
      <translation>声の学習に使うすべてのクリップです。文字起こしは編集して直せます（F2）。再生して確かめ、不要なものは削除してください。</translation>
    </message>
    <message>
      <source>State</source>
      <translation>状態</translation>
    </message>
    <message>
      <source>There is no usable clip yet: record or import speech first (Back).</source>
      <translation>使えるクリップがまだありません。先に音声を録音するか取り込んでください（戻る）。</translation>
    </message>
    <message>
      <source>no transcript</source>
      <translation>文字起こしなし</translation>
    </message>
    <message>
      <source>too long (over %1): left out</source>
      <translation>長すぎます（%1 超）：使いません</translation>
    </message>
    <message>
      <source>too short (under %1): left out</source>
      <translation>短すぎます（%1 未満）：使いません</translation>
    </message>
    <message>
      <source>Key: %1</source>
      <translation>キー：%1</translation>
    </message>
    <message>
      <source>Length</source>
      <translation>長さ</translation>
    </message>
    <message>
      <source>Transcript</source>
      <translation>文字起こし</translation>
    </message>
    <message>
      <source>good</source>
      <translation>良好</translation>
    </message>
  </context>
  <context>
    <name>StartPage</name>
    <message>
      <source> — trained</source>
      <translation> ― 学習済み</translation>
    </message>
    <message>
      <source> — training stopped at step %1 of %2</source>
      <translation> ― 学習はステップ %1 / %2 で止まっています</translation>
    </message>
    <message>
      <source>%1: %2 clips, %3 min</source>
      <translation>%1：%2 クリップ、%3 分</translation>
    </message>
    <message>
      <source>&amp;Continue a voice:</source>
      <translation>作りかけの声を続ける(&amp;C):</translation>
    </message>
    <message>
      <source>&amp;Import a folder of recordings (wav, flac, ogg, mp3) with transcripts</source>
      <translation>録音のフォルダーを取り込む（wav・flac・ogg・mp3 と文字起こし）(&amp;I)</translation>
    </message>
    <message>
      <source>&amp;New voice, named:</source>
      <translation>新しい声の名前(&amp;N):</translation>
    </message>
    <message>
      <source>&amp;Record: read sentences aloud, one at a time</source>
      <translation>読み上げて録音する（一文ずつ）(&amp;R)</translation>
    </message>
    <message>
      <source>(no voice in the making yet)</source>
      <translation>（作りかけの声はまだありません）</translation>
    </message>
    <message>
      <source>A voice named %1 exists already. The new one replaces it once it is trained (you are asked first).</source>
      <translation>「%1」という声はすでにあります。新しい声は学習が終わると置き換わります（その前に確認します）。</translation>
    </message>
    <message>
      <source>A voice named %1 is being made already: choose it under Continue, or another name.</source>
      <translation>「%1」という声はすでに作りかけです。「作りかけの声を続ける」で選ぶか、別の名前にしてください。</translation>
    </message>
    <message>
      <source>Create a voice</source>
      <translation>声を作る</translation>
    </message>
    <message>
      <source>Go on with the speech collected so far (&amp;check and train)</source>
      <translation>集めた音声で先に進む（確認して学習）(&amp;C)</translation>
    </message>
    <message>
      <source>Its folder is named %1.</source>
      <translation>フォルダー名は「%1」になります。</translation>
    </message>
    <message>
      <source>Its training stopped before the end; on the training page, Resume goes on from the last checkpoint.</source>
      <translation>この声の学習は途中で止まっています。学習のページの「再開」で最後のチェックポイントから続けられます。</translation>
    </message>
    <message>
      <source>The folder %1 could not be made: %2</source>
      <translation>フォルダー %1 を作れませんでした：%2</translation>
    </message>
    <message>
      <source>The speech:</source>
      <translation>音声：</translation>
    </message>
    <message>
      <source>Train a voice of your own for the model: collect your speech (read sentences aloud, or import recordings), check it, train, and try the voice.</source>
      <translation>モデルに自分の声を学習させます。音声を集め（文を読み上げるか、録音を取り込む）、確認して、学習し、声を試します。</translation>
    </message>
    <message>
      <source>for example: my-voice</source>
      <translation>例：わたしの声</translation>
    </message>
  </context>
  <context>
    <name>TrainPage</name>
    <message>
      <source> (loss %1)</source>
      <translation>（損失 %1）</translation>
    </message>
    <message>
      <source>%1 clips, %2 min of speech.</source>
      <translation>クリップ %1 個、音声 %2 分。</translation>
    </message>
    <message>
      <source>&amp;Play the preview</source>
      <translation>試し聞き(&amp;P)</translation>
    </message>
    <message>
      <source>&amp;Resume</source>
      <translation>再開(&amp;R)</translation>
    </message>
    <message>
      <source>&amp;Start training</source>
      <translation>学習を始める(&amp;S)</translation>
    </message>
    <message>
      <source>, about %1 left</source>
      <translation>、残り約 %1</translation>
    </message>
    <message>
      <source>A higher rank learns more of the voice and needs more memory; more steps take longer. Resume keeps the settings the training started with.</source>
      <translation>ランクを上げると声をより細かく学習しますが、メモリを多く使います。ステップ数を増やすと時間がかかります。再開するときは、学習を始めたときの設定のままです。</translation>
    </message>
    <message>
      <source>A training of this voice stopped at step %1 of %2. Resume goes on from there.</source>
      <translation>この声の学習はステップ %1 / %2 で止まっています。「再開」でそこから続けます。</translation>
    </message>
    <message>
      <source>Base precision</source>
      <translation>モデルの精度</translation>
    </message>
    <message>
      <source>Cancel</source>
      <translation>キャンセル</translation>
    </message>
    <message>
      <source>Choose int8.</source>
      <translation>int8 を選んでください。</translation>
    </message>
    <message>
      <source>Details</source>
      <translation>詳細</translation>
    </message>
    <message>
      <source>GPU memory (%1): the training needs about %2 GB; %3 GB are free now, %4 GB with the chat model unloaded.</source>
      <translation>GPU メモリ（%1）：学習には約 %2 GB 必要です。いまの空きは %3 GB、会話用のモデルを外すと %4 GB です。</translation>
    </message>
    <message>
      <source>Loading the model for training…</source>
      <translation>学習用にモデルを読み込んでいます…</translation>
    </message>
    <message>
      <source>Preparing the clips: %1 of %2.</source>
      <translation>クリップを準備しています：%2 個中 %1 個。</translation>
    </message>
    <message>
      <source>Replace it</source>
      <translation>置き換える</translation>
    </message>
    <message>
      <source>Replace the voice?</source>
      <translation>声を置き換えますか？</translation>
    </message>
    <message>
      <source>Resume goes on from the last checkpoint.</source>
      <translation>「再開」で最後のチェックポイントから続けられます。</translation>
    </message>
    <message>
      <source>St&amp;op</source>
      <translation>停止(&amp;O)</translation>
    </message>
    <message>
      <source>Start over</source>
      <translation>最初から学習する</translation>
    </message>
    <message>
      <source>Start over?</source>
      <translation>最初から学習しますか？</translation>
    </message>
    <message>
      <source>Starting the training…</source>
      <translation>学習を始めています…</translation>
    </message>
    <message>
      <source>Step %1</source>
      <translation>ステップ %1</translation>
    </message>
    <message>
      <source>Step %1 of %2</source>
      <translation>ステップ %1 / %2</translation>
    </message>
    <message>
      <source>Stopped at step %1. Resume goes on from the last checkpoint.</source>
      <translation>ステップ %1 で停止しました。「再開」で最後のチェックポイントから続けられます。</translation>
    </message>
    <message>
      <source>Stopping after this step (the last checkpoint is kept)…</source>
      <translation>このステップのあとで止めます（最後のチェックポイントは残ります）…</translation>
    </message>
    <message>
      <source>The chat model is unloaded while the voice trains: the conversation pauses and comes back by itself when the training ends.</source>
      <translation>学習のあいだ会話用のモデルを外します。会話は一時停止し、学習が終わると自動的に戻ります。</translation>
    </message>
    <message>
      <source>The chat model stays loaded: you can go on talking while the voice trains.</source>
      <translation>会話用のモデルは読み込んだままです。学習中も会話を続けられます。</translation>
    </message>
    <message>
      <source>The training failed: %1</source>
      <translation>学習に失敗しました：%1</translation>
    </message>
    <message>
      <source>The voice %1 exists already. The new one replaces it once it is trained (until then the old one stays usable).</source>
      <translation>声「%1」はすでにあります。新しい声は学習が終わると置き換わります（それまでは今の声を使えます）。</translation>
    </message>
    <message>
      <source>The voice is finished (%1 steps).</source>
      <translation>声ができました（%1 ステップ）。</translation>
    </message>
    <message>
      <source>The voice is trained in a process of its own: the app and the speech you collected are safe whatever happens to it. You can close this window; the training goes on.</source>
      <translation>声の学習は別のプロセスで行います。学習に何が起きても、アプリと集めた音声はそのまま残ります。このウィンドウを閉じても学習は続きます。</translation>
    </message>
    <message>
      <source>The voice so far, at each checkpoint:</source>
      <translation>チェックポイントごとの声：</translation>
    </message>
    <message>
      <source>There is no CUDA GPU: the voice trains on the CPU (%1), which is very slow.</source>
      <translation>CUDA 対応の GPU がありません。CPU（%1）で学習するので、とても時間がかかります。</translation>
    </message>
    <message>
      <source>This card cannot train the voice at this precision, even with the chat model unloaded.</source>
      <translation>この GPU では、会話用のモデルを外しても、この精度で学習できません。</translation>
    </message>
    <message>
      <source>This voice has a training that stopped before the end. Starting over drops it; Resume goes on from it instead.</source>
      <translation>この声には途中で止まった学習があります。最初から学習するとそれは消えます。続けるには「再開」を使ってください。</translation>
    </message>
    <message>
      <source>This voice is trained. Training it again replaces it once the new one is finished.</source>
      <translation>この声は学習済みです。もう一度学習すると、終わったときに新しい声に置き換わります。</translation>
    </message>
    <message>
      <source>Time: about %1 (an estimate from this card's published speed).</source>
      <translation>所要時間：約 %1（この GPU の公表性能からの推定）。</translation>
    </message>
    <message>
      <source>Time: no estimate for this device.</source>
      <translation>所要時間：この装置では推定できません。</translation>
    </message>
    <message>
      <source>Train the voice</source>
      <translation>声を学習する</translation>
    </message>
    <message>
      <source>Working out what the training needs…</source>
      <translation>学習に必要なものを調べています…</translation>
    </message>
    <message>
      <source>automatic</source>
      <translation>自動</translation>
    </message>
    <message>
      <source>automatic (%1)</source>
      <translation>自動（%1）</translation>
    </message>
    <message>
      <source>automatic (from the amount of speech)</source>
      <translation>自動（音声の量から）</translation>
    </message>
    <message>
      <source>int8, less memory</source>
      <translation>int8（省メモリ）</translation>
    </message>
    <message>
      <source>%1 (recommended)</source>
      <translation>%1（おすすめ）</translation>
    </message>
    <message>
      <source>Steps</source>
      <translation>ステップ数</translation>
    </message>
    <message>
      <source>LoRA rank</source>
      <translation>LoRA のランク</translation>
    </message>
  </context>
  <context>
    <name>VoiceDialogs</name>
    <message>
      <source>Export the voice</source>
      <translation>声を書き出す</translation>
    </message>
    <message>
      <source>Import a voice</source>
      <translation>声を読み込む</translation>
    </message>
    <message>
      <source>Voice files (*.zip)</source>
      <translation>声のファイル (*.zip)</translation>
    </message>
  </context>
  <context>
    <name>VoiceFormat</name>
    <message>
      <source>%1 h %2 min</source>
      <translation>%1 時間 %2 分</translation>
    </message>
    <message>
      <source>%1 min %2 s</source>
      <translation>%1 分 %2 秒</translation>
    </message>
    <message>
      <source>%1 s</source>
      <translation>%1 秒</translation>
    </message>
  </context>
  <context>
    <name>VoiceMenu</name>
    <message>
      <source>%1 (%2 min of speech)</source>
      <translation>%1（%2 分の音声）</translation>
    </message>
    <message>
      <source>Choose a folder…</source>
      <translation>フォルダーから選ぶ…</translation>
    </message>
    <message>
      <source>Export this voice…</source>
      <translation>この声を書き出す…</translation>
    </message>
    <message>
      <source>Import a voice…</source>
      <translation>声を読み込む…</translation>
    </message>
    <message>
      <source>The model's own voice</source>
      <translation>モデル本来の声</translation>
    </message>
    <message>
      <source>Create a voice…</source>
      <translation>声を作る…</translation>
    </message>
  </context>
  <context>
    <name>VoiceUi</name>
    <message>
      <source>Choose the voice folder (a LoRA adapter)</source>
      <translation>声のフォルダー（LoRA アダプター）を選ぶ</translation>
    </message>
    <message>
      <source>Choose, create, import or export a voice</source>
      <translation>声を選ぶ・作る・読み込む・書き出す</translation>
    </message>
    <message>
      <source>Sharing a voice</source>
      <translation>声の共有</translation>
    </message>
    <message>
      <source>The training of %1 failed: %2</source>
      <translation>「%1」の学習に失敗しました：%2</translation>
    </message>
    <message>
      <source>The training of %1 was stopped; it can be resumed.</source>
      <translation>「%1」の学習を停止しました。あとで再開できます。</translation>
    </message>
    <message>
      <source>The voice %1 is finished: choose it in the voice menu.</source>
      <translation>声「%1」ができました。「声」メニューから選べます。</translation>
    </message>
    <message>
      <source>The voice %1 was imported: choose it in the voice menu.</source>
      <translation>声「%1」を読み込みました。「声」メニューから選べます。</translation>
    </message>
    <message>
      <source>The voice goes on training; Voice → Create a voice… shows its progress.</source>
      <translation>声の学習は続いています。「声」→「声を作る…」で進み具合を見られます。</translation>
    </message>
    <message>
      <source>The voice was exported to %1.</source>
      <translation>声を %1 に書き出しました。</translation>
    </message>
    <message>
      <source>Voice training</source>
      <translation>声の学習</translation>
    </message>
    <message>
      <source>Voice</source>
      <translation>声</translation>
    </message>
  </context>
  <context>
    <name>VoiceWizard</name>
    <message>
      <source>Close</source>
      <translation>閉じる</translation>
    </message>
    <message>
      <source>Create a voice</source>
      <translation>声を作る</translation>
    </message>
  </context>
  <context>
    <name>HandsFreeUi</name>
    <message>
      <source>Hands-free</source>
      <translation>ハンズフリー</translation>
    </message>
    <message>
      <source>Talk without holding the button: the app listens, answers when you pause, and stops its answer when you speak.</source>
      <translation>ボタンを押さずに話せます。アプリが聞き取り、話し終えると答え、答えの途中で話すと答えを止めます。</translation>
    </message>
    <message>
      <source>Mute microphone</source>
      <translation>マイクをミュート</translation>
    </message>
    <message>
      <source>Microphone muted (unmute)</source>
      <translation>マイクはミュート中（解除）</translation>
    </message>
    <message>
      <source>Hands-free is on: just speak. Holding the button still records a take.</source>
      <translation>ハンズフリーがオンです。そのまま話してください。ボタンを押している間の録音もできます。</translation>
    </message>
    <message>
      <source>Hands-free waits for the model</source>
      <translation>ハンズフリーはモデルの読み込みを待っています</translation>
    </message>
  </context>
  <context>
    <name>StatusBarUi</name>
    <message>
      <source>Downloading the model</source>
      <translation>モデルをダウンロード中</translation>
    </message>
    <message>
      <source>Loading weights</source>
      <translation>重みを読み込み中</translation>
    </message>
    <message>
      <source>Merging the voice</source>
      <translation>声を合成中</translation>
    </message>
    <message>
      <source>Capturing CUDA graphs</source>
      <translation>CUDA グラフを作成中</translation>
    </message>
    <message>
      <source>Warming up (one silent turn)</source>
      <translation>ウォームアップ中（無音で 1 回応答）</translation>
    </message>
    <message>
      <source>Building the demo model</source>
      <translation>デモモデルを作成中</translation>
    </message>
    <message>
      <source>Checking int8 against bf16 (once per model and GPU)</source>
      <translation>int8 を bf16 と比べて確認中（モデルと GPU ごとに 1 回）</translation>
    </message>
    <message>
      <source>Model ready</source>
      <translation>モデルの準備完了</translation>
    </message>
    <message>
      <source>CUDA graphs ready</source>
      <translation>CUDA グラフ準備完了</translation>
    </message>
    <message>
      <source>No CUDA graphs</source>
      <translation>CUDA グラフなし</translation>
    </message>
    <message>
      <source>Starting (%1)</source>
      <translation>準備中（%1）</translation>
    </message>
    <message>
      <source>Model: %1</source>
      <translation>モデル：%1</translation>
    </message>
    <message>
      <source>Voice: %1</source>
      <translation>声：%1</translation>
    </message>
    <message>
      <source>default</source>
      <translation>標準</translation>
    </message>
    <message>
      <source>VRAM %1</source>
      <translation>VRAM %1</translation>
    </message>
    <message>
      <source>%1 · %2</source>
      <translation>%1 · %2</translation>
    </message>
  </context>
  <context>
    <name>ConversationFlow</name>
    <message>
      <source>Start a new conversation? The model starts afresh, without the current conversation.</source>
      <translation>新しい会話を始めますか？モデルは今の会話を忘れて、最初からやり直します。</translation>
    </message>
    <message>
      <source>Start a new conversation?</source>
      <translation>新しい会話を始めますか？</translation>
    </message>
    <message>
      <source>Erase the conversation?</source>
      <translation>会話を消去しますか？</translation>
    </message>
    <message>
      <source>The conversation is exported when this answer has finished playing.</source>
      <translation>この応答の再生が終わってから、会話をエクスポートします。</translation>
    </message>
    <message>
      <source>The current conversation stays in the history, where you can read, replay, export or continue it.</source>
      <translation>今の会話は履歴に残ります。履歴から読み返す・再生する・エクスポートする・続けることができます。</translation>
    </message>
    <message>
      <source>This conversation is not being saved in the history: it will be erased.</source>
      <translation>この会話は履歴に保存されていないため、消去されます。</translation>
    </message>
    <message>
      <source>Export first…</source>
      <translation>先にエクスポート…</translation>
    </message>
    <message>
      <source>Start a new conversation</source>
      <translation>新しい会話を始める</translation>
    </message>
    <message>
      <source>Stay in this conversation</source>
      <translation>この会話を続ける</translation>
    </message>
    <message>
      <source>Erase the conversation</source>
      <translation>会話を消去</translation>
    </message>
    <message>
      <source>Keep the conversation</source>
      <translation>会話を残す</translation>
    </message>
    <message>
      <source>There is nothing to export yet.</source>
      <translation>まだエクスポートするものがありません。</translation>
    </message>
    <message>
      <source>You can also export it first (audio, transcript and timings).</source>
      <translation>先にエクスポートしておくこともできます（音声・文字起こし・タイミング）。</translation>
    </message>
    <message>
      <source>To keep a copy, export it first (audio, transcript and timings).</source>
      <translation>残しておくには、先にエクスポートしてください（音声・文字起こし・タイミング）。</translation>
    </message>
    <message>
      <source>Conversation exported to %1: %2</source>
      <translation>会話を %1 にエクスポートしました：%2</translation>
    </message>
  </context>
</TS>
