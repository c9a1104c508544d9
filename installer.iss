; Inno Setup script for VoiceChat: a per-user installer of the PyInstaller bundle dist\VoiceChat\.
;
; Built by packaging\build_windows.ps1 (and .github\workflows\windows-installer.yml):
;   "%ProgramFiles(x86)%\Inno Setup 6\ISCC.exe" /DAppVersion=0.1.0 installer.iss
; Output: Output\VoiceChat-Setup-<version>.exe plus Output\VoiceChat-Setup-<version>-N.bin slices.
; Keep all files of one release in the same folder; Setup.exe reads the .bin files next to it.
;
; tests/test_installer_wine.py compiles this very file with ISCC under wine and installs, upgrades
; and uninstalls the result; tests/test_installer_static.py checks what ISCC cannot (the fixed
; AppId, the release slice size, every message in both languages, the data folder matching
; engine/paths.py). Needs Inno Setup 6.3 or newer (x64compatible).
;
; Defines (ISCC /DName=Value), each with the default a release build uses:
;   AppVersion    the version shown in Windows' app list and in the file names
;   SliceSize     bytes per .bin slice (the wine test shrinks it to test spanning)
;   DefaultDir    the install folder offered (the wine test overrides it for the per-user
;                 install only because wine 8 has no per-user Program Files folder)
;
; Uninstaller: "unins000.exe /REMOVEUSERDATA=yes" (or =no) answers the "also delete your data?"
; question in advance, so that a silent or scripted uninstall can remove the data as well;
; without it a silent uninstall keeps the data, an interactive one asks.

#if Ver < EncodeVer(6, 3, 0)
  #error Inno Setup 6.3 or newer is needed (ArchitecturesAllowed=x64compatible); this is an older ISCC.exe
#endif

#define AppName "VoiceChat"
#define AppExeName "VoiceChat.exe"
; platformdirs' "appauthor": on Windows the app's data lives in %LOCALAPPDATA%\<author>\<name>.
#define AppAuthor "VoiceChat"
#define AppPublisher "VoiceChat"
; Must match APP_NAME in packaging\voicechat.spec (the folder PyInstaller writes to dist\).
#define BundleDir "dist\VoiceChat"
#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
; Every release file (Setup.exe and each .bin slice) must stay under GitHub's 2 GiB
; (2147483648 bytes) limit per release asset; 1.9e9 leaves room for Inno's own slice overhead.
#ifndef SliceSize
  #define SliceSize "1900000000"
#endif
#ifndef DefaultDir
  #define DefaultDir "{autopf}\" + AppName
#endif

[Setup]
; The AppId identifies the installation for upgrades and uninstall: never change it.
AppId={{048155F3-7582-4BDE-9E0A-C754BCC5D460}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher={#AppPublisher}
; Per-user install into %LOCALAPPDATA%\Programs (no UAC prompt); the user can still pick an
; all-users install in the privileges dialog, or with /ALLUSERS on the command line.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
DefaultDirName={#DefaultDir}
DisableProgramGroupPage=yes
; The bundle is 64-bit only (CUDA torch); x64compatible also admits Arm64 Windows 11 via emulation.
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
; torch 2.x and current NVIDIA drivers need Windows 10 or newer.
MinVersion=10.0
OutputDir=Output
OutputBaseFilename={#AppName}-Setup-{#AppVersion}
SetupIconFile=assets\icon.ico
UninstallDisplayIcon={app}\{#AppExeName}
UninstallDisplayName={#AppName}
WizardStyle=modern
ShowLanguageDialog=auto
SetupLogging=yes
; The CUDA libraries alone are several GB. lzma2/normal packs them nearly as small as /max in a
; fraction of the build time; solid compression would need the whole payload in one stream.
Compression=lzma2/normal
SolidCompression=no
; Large DLLs are compressed in two blocks at a time (each with its two match-finder threads: the
; 4 cores of a windows-latest runner), in a separate 64-bit process so that memory is no limit.
LZMANumBlockThreads=2
LZMAUseSeparateProcess=yes
; Always span: the payload is larger than 2 GB (see SliceSize above).
DiskSpanning=yes
DiskSliceSize={#SliceSize}
SlicesPerDisk=1

[Languages]
; Japanese first: it is the fallback when the Windows UI language is neither of the two.
Name: "japanese"; MessagesFile: "compiler:Languages\Japanese.isl"
Name: "english"; MessagesFile: "compiler:Default.isl"

[CustomMessages]
japanese.RemoveUserData=VoiceChat のデータも削除しますか？%n%n次のフォルダーにある、ダウンロード済みのモデル (数 GB)、設定、ログが削除されます:%n%1%n%n再インストールするときのために残しておく場合は「いいえ」を選んでください。
english.RemoveUserData=Also delete your VoiceChat data?%n%nThis deletes the downloaded models (several GB), your settings and the logs in:%n%1%n%nChoose No to keep them for a later reinstall.
japanese.RemoveUserDataFailed=%1 の一部のファイルを削除できませんでした。必要であれば手動で削除してください。
english.RemoveUserDataFailed=Some files in %1 could not be deleted. You can delete the folder yourself.
japanese.SliceMissing=%1 が見つかりません。%n%nこのリリースのファイル (.exe とすべての .bin ファイル) を同じフォルダーにダウンロードしてから、もう一度セットアップを起動してください。
english.SliceMissing=Setup cannot find %1.%n%nDownload all files of this release (the .exe and every .bin file) into the same folder, then start Setup again.
japanese.SliceDamaged=%1 は不完全か壊れています。%n%nもう一度ダウンロードしてから (リリースページの SHA256SUMS.txt と照合できます)、セットアップを起動し直してください。
english.SliceDamaged=%1 is incomplete or damaged.%n%nDownload it again (you can compare it with SHA256SUMS.txt on the release page), then start Setup again.

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; An upgrade must not mix the old bundle's libraries with the new ones (stale torch/Qt DLLs
; would be loaded); remove the previous _internal folder before copying the new one.
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#BundleDir}\{#AppExeName}"; DestDir: "{app}"; Flags: ignoreversion
Source: "{#BundleDir}\_internal\*"; DestDir: "{app}\_internal"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\{#AppName}"; Filename: "{app}\{#AppExeName}"; WorkingDir: "{app}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExeName}"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExeName}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[Code]
// Setup reads its .bin slices from the folder it was started from. When one is missing it asks for
// "the next disk" and waits, even in a silent install, so check them all before anything is copied.
// Every slice but the last is exactly DiskSliceSize bytes (the first one less the room reserved
// for Setup.exe, which is the exe's size rounded up to 512), and each slice's header records its
// own size: so a slice that is missing, truncated, or followed by a missing one is found here.
// Known limit: a release whose payload fits in one slice that is within 4 KiB of full would be
// refused; a release always spans several slices, and the test builds use small payloads.
const
  SliceSize = {#SliceSize};
  SliceHeaderSize = 12; // 'idska32'#26, then the slice's size (32-bit little-endian)
  FirstSliceTolerance = 4096;

function SliceFileName(Number: Integer): String;
begin
  // Setup derives the slice names from its own file name (also when the user renamed it).
  Result := ChangeFileExt(ExpandConstant('{srcexe}'), '') + '-' + IntToStr(Number) + '.bin';
end;

// The size recorded in the slice's header, or -1 if the file cannot be read or is no slice.
function RecordedSliceSize(FileName: String): Integer;
var
  Stream: TFileStream;
  Header: AnsiString;
begin
  Result := -1;
  try
    Stream := TFileStream.Create(FileName, fmOpenRead or fmShareDenyWrite);
    try
      SetLength(Header, SliceHeaderSize);
      if (Stream.Read(Header, SliceHeaderSize) = SliceHeaderSize) and (Copy(Header, 1, 8) = 'idska32' + #26) then
        Result := Ord(Header[9]) or (Ord(Header[10]) shl 8) or (Ord(Header[11]) shl 16) or (Ord(Header[12]) shl 24);
    finally
      Stream.Free;
    end;
  except
    Result := -1;
  end;
end;

function SlicesComplete(): Boolean;
var
  Number, Size, SetupSize, FullSize: Integer;
  FileName: String;
begin
  Result := False;
  if not FileSize(ExpandConstant('{srcexe}'), SetupSize) then
    SetupSize := 0;
  Number := 1;
  while True do
  begin
    FileName := SliceFileName(Number);
    if not FileSize(FileName, Size) then
    begin
      Log('Missing slice: ' + FileName);
      SuppressibleMsgBox(FmtMessage(CustomMessage('SliceMissing'), [FileName]), mbCriticalError, MB_OK, IDOK);
      Exit;
    end;
    if RecordedSliceSize(FileName) <> Size then
    begin
      Log('Damaged slice: ' + FileName);
      SuppressibleMsgBox(FmtMessage(CustomMessage('SliceDamaged'), [FileName]), mbCriticalError, MB_OK, IDOK);
      Exit;
    end;
    if Number = 1 then
      FullSize := SliceSize - SetupSize - FirstSliceTolerance
    else
      FullSize := SliceSize;
    if Size < FullSize then
      Break; // the last slice
    Number := Number + 1;
  end;
  Log(Format('All %d slices are present.', [Number]));
  Result := True;
end;

function InitializeSetup(): Boolean;
begin
  Result := SlicesComplete();
end;

// Models (Hugging Face cache under models\), settings.json, history\ and Logs\ all live
// in one folder (engine/paths.py): platformdirs' user data dir, which on Windows is
// %LOCALAPPDATA%\<author>\<app name>. It survives the uninstall unless the user agrees to remove it.
function UserDataDir(): String;
begin
  Result := ExpandConstant('{localappdata}\{#AppAuthor}\{#AppName}');
end;

// /REMOVEUSERDATA=yes or =no answers in advance (the wine test uses it; so can an administrator's
// script); otherwise an interactive uninstall asks, with "No" as the default button, and a silent
// one, which cannot ask, keeps the data.
function ShouldRemoveUserData(DataDir: String): Boolean;
var
  Answer: String;
begin
  Answer := Lowercase(ExpandConstant('{param:REMOVEUSERDATA|ask}'));
  if Answer = 'yes' then
    Result := True
  else if (Answer = 'no') or UninstallSilent() then
    Result := False
  else
    Result := MsgBox(FmtMessage(CustomMessage('RemoveUserData'), [DataDir]), mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
var
  DataDir: String;
begin
  if CurUninstallStep <> usPostUninstall then
    Exit;
  DataDir := UserDataDir();
  if not DirExists(DataDir) then
    Exit;
  if not ShouldRemoveUserData(DataDir) then
    Exit;
  if not DelTree(DataDir, True, True, True) then
    SuppressibleMsgBox(FmtMessage(CustomMessage('RemoveUserDataFailed'), [DataDir]), mbError, MB_OK, IDOK);
  // The <author> folder above it goes too, but only if nothing else is in it.
  RemoveDir(ExtractFileDir(DataDir));
end;
