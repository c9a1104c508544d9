; Inno Setup script for VoiceChat: a per-user installer of the PyInstaller bundle dist\VoiceChat\.
;
; Built by packaging\build_windows.ps1 (and .github\workflows\windows-installer.yml):
;   "%ProgramFiles(x86)%\Inno Setup 6\ISCC.exe" /DAppVersion=0.1.0 installer.iss
; Output: Output\VoiceChat-Setup-<version>.exe plus Output\VoiceChat-Setup-<version>-N.bin slices.
; Keep all files of one release in the same folder; Setup.exe reads the .bin files next to it.
;
; tests/test_installer_static.py checks this file on Linux (keys, paths, languages), since no
; Windows machine runs it in the test suite. Needs Inno Setup 6.3 or newer (x64compatible).

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
DefaultDirName={autopf}\{#AppName}
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
; Always span: the payload is larger than 2 GB, and every release file (Setup.exe and each
; .bin slice) must stay under GitHub's 2 GiB (2147483648 bytes) limit per release asset.
DiskSpanning=yes
DiskSliceSize=2000000000
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
// Models (Hugging Face cache under models\), settings.json and Logs\ all live in
// platformdirs' user data dir, which on Windows is %LOCALAPPDATA%\<author>\<app name>.
// They survive the uninstall unless the user agrees to remove them.
function UserDataDir(): String;
begin
  Result := ExpandConstant('{localappdata}\{#AppAuthor}\{#AppName}');
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
  // A silent uninstall cannot ask, so it keeps the data. "No" is the default button.
  if UninstallSilent() then
    Exit;
  if MsgBox(FmtMessage(CustomMessage('RemoveUserData'), [DataDir]), mbConfirmation, MB_YESNO or MB_DEFBUTTON2) <> IDYES then
    Exit;
  if not DelTree(DataDir, True, True, True) then
    MsgBox(FmtMessage(CustomMessage('RemoveUserDataFailed'), [DataDir]), mbError, MB_OK);
  // The <author> folder above it goes too, but only if nothing else is in it.
  RemoveDir(ExtractFileDir(DataDir));
end;
