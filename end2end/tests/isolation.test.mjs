// From a terminal of her own code-server, opened in the page and typed into as she would, a user
// reaches nothing that is not hers: the attempts of the integration tests (server/tests/it/attack.py)
// against another user's live session, the database and the server, run by her shell.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, signIn } from './helpers.mjs';

mkdirSync(ARTIFACTS, { recursive: true });
const DATA = process.env.E2E_DATA_DIR;
const SERVER_PID = process.env.E2E_SERVER_PID;

// The session's runtime handle (pid, socket) as the server recorded it.
function handleOf(sessionId) {
  const row = execFileSync('sqlite3', ['-readonly', join(DATA, 'sandbox.db'),
    `SELECT runtime_handle FROM sessions WHERE id = '${sessionId.replace(/[^0-9a-f]/g, '')}'`]);
  return JSON.parse(row.toString().trim());
}

// The attack's targets, as Python assignments put before the script.
function prelude(victim, handle, dbPort) {
  const workspaces = join(DATA, 'workspaces');
  const targets = {
    OTHER_FILE: join(workspaces, victim, 'secret.txt'),
    OTHER_DIR: join(workspaces, victim),
    WORKSPACES: workspaces,
    DATABASE: join(DATA, 'sandbox.db'),
    DATA_DIR: DATA,
    SERVER_PID: Number(SERVER_PID),
    OTHER_PID: Number(handle.pid),
    OTHER_SOCKET: handle.socket ?? '',
    DB_PORT: dbPort,
  };
  return Object.entries(targets).map(([name, value]) => `${name} = ${JSON.stringify(value)}\n`).join('');
}

// A new terminal, as from the menu's Terminal › New Terminal (Ctrl+Shift+`). A workbench still
// starting ignores the keys, so they are pressed again until a terminal opens.
async function openTerminal(page, frame) {
  const terminal = frame.locator('.xterm-helper-textarea').first();
  for (let attempt = 0; attempt < 8; attempt += 1) {
    await frame.locator('.monaco-workbench').click({ position: { x: 640, y: 300 } });
    await page.keyboard.press('Control+Shift+Backquote');
    try {
      await terminal.waitFor({ state: 'attached', timeout: 15_000 });
      return terminal;
    } catch {
      await page.screenshot({ path: `${ARTIFACTS}/code-server-no-terminal-${attempt}.png` });
    }
  }
  assert.fail('code-server opened no terminal');
}

// Whether `path` appears within `ms`.
async function appears(page, path, ms) {
  for (let waited = 0; waited < ms; waited += 500) {
    if (existsSync(path)) return true;
    await page.waitForTimeout(500);
  }
  return existsSync(path);
}

test('from a terminal in her code-server, a user reaches nothing that is not hers', async () => {
  assert.ok(DATA && SERVER_PID, 'scripts/e2e.sh names the data dir and the server (E2E_DATA_DIR, E2E_SERVER_PID)');
  const browser = await launchBrowser();
  // A listener standing in for a database server on this machine's loopback.
  const database = createServer((socket) => socket.destroy());
  await new Promise((done) => database.listen(0, '127.0.0.1', done));
  try {
    // The victim's editor, live while the attack runs.
    const victimPage = await browser.newPage();
    await signIn(victimPage, 'e2e-victim', PASSWORD);
    await victimPage.waitForURL(`${BASE}/`);
    const victims = await launchByApi(victimPage, { editor: 'marimo' });
    await readyByApi(victimPage, victims.id);
    writeFileSync(join(DATA, 'workspaces', 'e2e-victim', 'secret.txt'), "the victim's own");

    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await signIn(page, 'e2e-cs', PASSWORD);
    await page.waitForURL(`${BASE}/`);
    const hers = await launchByApi(page, { editor: 'code-server' });
    await readyByApi(page, hers.id);
    const home = join(DATA, 'workspaces', 'e2e-cs');
    const script = prelude('e2e-victim', handleOf(victims.id), database.address().port)
      + readFileSync(new URL('../../server/tests/it/attack.py', import.meta.url), 'utf8');
    writeFileSync(join(home, 'attack.py'), script);
    chmodSync(join(home, 'attack.py'), 0o644);
    const out = join(home, 'attack-out.json');
    rmSync(out, { force: true });

    await page.goto(`${BASE}/sessions/${hers.id}`);
    await hydrated(page);
    const frame = page.frameLocator('[data-testid=editor-frame]');
    await frame.locator('.monaco-workbench').waitFor({ timeout: 120_000 });
    const terminal = await openTerminal(page, frame);
    // Written under a name of its own first, so that a half-written file is never read. Keys
    // typed before the shell is up may be lost (it draws on a canvas: no prompt to wait for), so
    // the line is typed again until the file appears; running it twice changes nothing.
    for (let attempt = 0; ; attempt += 1) {
      await terminal.focus();
      await page.keyboard.type('python3 "$HOME/attack.py" > "$HOME/attack-out.part" 2>&1; mv "$HOME/attack-out.part" "$HOME/attack-out.json"');
      await page.keyboard.press('Enter');
      if (await appears(page, out, 40_000)) break;
      await page.screenshot({ path: `${ARTIFACTS}/code-server-terminal-attempt-${attempt}.png` });
      assert.ok(attempt < 3, `the attack typed into the terminal never finished: ${readdirSync(home)}`);
    }
    await page.screenshot({ path: `${ARTIFACTS}/code-server-terminal.png` });
    const printed = readFileSync(out, 'utf8');
    const results = JSON.parse(printed.trim().split('\n').pop());
    assert.equal(Object.keys(results).length, 10, printed);
    const succeeded = Object.entries(results).filter(([, [ok]]) => ok).map(([name]) => name);
    assert.deepEqual(succeeded, [], printed);
    assert.ok(!existsSync(join(DATA, 'workspaces', 'e2e-victim', 'planted.txt')), 'nothing planted in hers');
    // What is hers she reaches: the file her shell wrote is in her workspace, written as her.
    assert.ok(readdirSync(home).includes('attack-out.json'));

    for (const [p, id] of [[page, hers.id], [victimPage, victims.id]]) {
      await p.evaluate(async (id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), id);
    }
  } finally {
    database.close();
    await browser.close();
  }
});
