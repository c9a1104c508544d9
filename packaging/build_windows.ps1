<#
.SYNOPSIS
    Build the VoiceChat installer on Windows: CUDA torch, PyInstaller bundle, Inno Setup.

.DESCRIPTION
    Run from any folder (PowerShell 5.1 or 7):

        powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1

    1. creates a Python 3.12 venv in build\venv-win (not the developer's .venv),
    2. installs torch/torchaudio from the PyTorch CUDA 12.8 index, then the project with [build],
       both pinned by scripts\constraints.txt,
    3. compiles the Qt translations (.ts -> .qm) when a .qm is missing or older,
    4. runs PyInstaller with packaging\voicechat.spec -> dist\VoiceChat\,
    5. optionally runs dist\VoiceChat\VoiceChat.exe --selftest (-SelfTest),
    6. compiles installer.iss with ISCC -> Output\VoiceChat-Setup-<version>.exe and .bin slices
       (-RemoveVenvBeforeInstaller first deletes the build venv and PyInstaller's work folder, which
       the installer does not need: CI runners have little disk to spare).

    Needs Python 3.12 (python.org or the py launcher) and Inno Setup 6.3 or newer.
    This file is ASCII on purpose: Windows PowerShell 5.1 reads BOM-less files as ANSI.
#>
[CmdletBinding()]
param(
    # python.exe to create the venv with; default: `py -3.12`, else `python` if it is 3.12.
    [string]$Python = "",
    [string]$Iscc = (Join-Path ${env:ProgramFiles(x86)} "Inno Setup 6\ISCC.exe"),
    [string]$TorchIndex = "https://download.pytorch.org/whl/cu128",
    [switch]$SelfTest,
    [switch]$SkipInstaller,
    [switch]$RemoveVenvBeforeInstaller
)

$ErrorActionPreference = "Stop"
$Root = Split-Path -Parent $PSScriptRoot
Set-Location $Root

# Native programs do not throw on failure; every call goes through this so a failed step stops
# the build instead of packaging a half-built bundle.
# A simple function (no param block) on purpose: an advanced one would try to bind "-m" or
# "--noconfirm" as its own parameters instead of passing them on.
function Invoke-Native {
    $exe, $rest = $args
    Write-Host ">> $exe $($rest -join ' ')"
    & $exe @rest
    if ($LASTEXITCODE -ne 0) { throw "$exe failed with exit code $LASTEXITCODE" }
}

function Find-Python312 {
    if ($Python) { return $Python }
    if (Get-Command py -ErrorAction SilentlyContinue) {
        # `py` complains on stderr when 3.12 is missing. Under "Stop", Windows PowerShell 5.1 turns
        # redirected native stderr into a terminating error, so the fallback below would never run:
        # relax the preference for this call only (the assignment is local to this function).
        $ErrorActionPreference = "Continue"
        $exe = & py -3.12 -c "import sys; print(sys.executable)" 2>$null
        $ErrorActionPreference = "Stop"
        if ($LASTEXITCODE -eq 0 -and $exe) { return "$exe".Trim() }
    }
    $candidate = Get-Command python -ErrorAction SilentlyContinue
    if ($candidate) {
        $version = & $candidate.Source -c "import sys; print('%d.%d' % sys.version_info[:2])"
        if ($version -eq "3.12") { return $candidate.Source }
    }
    throw "Python 3.12 not found: install it from python.org or pass -Python C:\path\to\python.exe"
}

# Pins shared with the Linux test setup (torch, torchaudio, transformers, liquid-audio, peft).
function Get-Pin([string]$Name) {
    $line = Get-Content (Join-Path $Root "scripts\constraints.txt") | Where-Object { $_ -match "^$Name==" } | Select-Object -First 1
    if (-not $line) { throw "no pin for $Name in scripts\constraints.txt" }
    return $line.Split("=")[-1].Trim()
}

$BasePython = Find-Python312
$Venv = Join-Path $Root "build\venv-win"
$VenvPy = Join-Path $Venv "Scripts\python.exe"
if (-not (Test-Path $VenvPy)) {
    Invoke-Native $BasePython -m venv $Venv
}
Invoke-Native $VenvPy -m pip install --upgrade pip

# --- 1. CUDA torch first, from the PyTorch index. PyPI's Windows torch wheels are CPU-only, so
# installing the project first would pull the CPU build; the constraints' torch==X.Y.Z also
# matches the local version X.Y.Z+cu128, so the next step keeps this one.
$Constraints = Join-Path $Root "scripts\constraints.txt"
$TorchPin = Get-Pin "torch"
$TorchaudioPin = Get-Pin "torchaudio"
Invoke-Native $VenvPy -m pip install --index-url $TorchIndex "torch==$TorchPin" "torchaudio==$TorchaudioPin"
Invoke-Native $VenvPy -m pip install -c $Constraints ".[build]"
$cuda = & $VenvPy -c "import torch; print(torch.version.cuda or '')"
if ($LASTEXITCODE -ne 0 -or -not $cuda) { throw "the venv has a CPU-only torch; the installer would not use the GPU" }
Write-Host "torch CUDA build: $cuda"

# --- 2. Qt translations: compile each .ts whose .qm is missing or older.
$Lrelease = Join-Path $Venv "Scripts\pyside6-lrelease.exe"
foreach ($ts in Get-ChildItem (Join-Path $Root "app\translations") -Filter *.ts) {
    $qm = [System.IO.Path]::ChangeExtension($ts.FullName, ".qm")
    if (-not (Test-Path $qm) -or (Get-Item $qm).LastWriteTime -lt $ts.LastWriteTime) {
        Invoke-Native $Lrelease $ts.FullName -qm $qm
    }
}

# --- 3. The one-folder bundle.
Invoke-Native $VenvPy -m PyInstaller --noconfirm --clean --distpath (Join-Path $Root "dist") --workpath (Join-Path $Root "build\pyinstaller") "packaging\voicechat.spec"
$Exe = Join-Path $Root "dist\VoiceChat\VoiceChat.exe"
if (-not (Test-Path $Exe)) { throw "PyInstaller did not produce $Exe" }

# --- 4. Self-test of the frozen app. VoiceChat.exe is a windowed program, so run it through
# Start-Process -Wait to get its exit code; its report lands in the user log dir.
if ($SelfTest) {
    $env:QT_QPA_PLATFORM = "offscreen"
    $proc = Start-Process -FilePath $Exe -ArgumentList "--selftest" -Wait -PassThru -NoNewWindow
    $LogDir = Join-Path $env:LOCALAPPDATA "VoiceChat\VoiceChat\Logs"
    $report = Get-ChildItem $LogDir -Filter "diagnostics-*.txt" -ErrorAction SilentlyContinue | Sort-Object LastWriteTime | Select-Object -Last 1
    if ($report) { Get-Content $report.FullName | Write-Host }
    if ($proc.ExitCode -ne 0) { throw "VoiceChat.exe --selftest failed with exit code $($proc.ExitCode)" }
}

if ($SkipInstaller) { return }

# --- 5. The installer. ISCC is called by its full path so that a different Inno Setup on PATH
# cannot be picked up by accident.
if (-not (Test-Path $Iscc)) { throw "Inno Setup compiler not found at $Iscc (install Inno Setup 6.3 or newer, or pass -Iscc)" }
$Version = & $VenvPy -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])"
if ($LASTEXITCODE -ne 0) { throw "could not read the version from pyproject.toml" }
if ($RemoveVenvBeforeInstaller) {
    foreach ($folder in @($Venv, (Join-Path $Root "build\pyinstaller"))) {
        if (Test-Path $folder) { Remove-Item -Recurse -Force $folder }
    }
}
# A stale slice of an earlier build would sit next to the new ones and be uploaded with them.
if (Test-Path (Join-Path $Root "Output")) { Remove-Item -Recurse -Force (Join-Path $Root "Output") }
Invoke-Native $Iscc "/DAppVersion=$($Version.Trim())" (Join-Path $Root "installer.iss")
Get-ChildItem (Join-Path $Root "Output") | Format-Table Name, Length
