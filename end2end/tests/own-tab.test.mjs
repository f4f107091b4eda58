// An editor page in a tab of its own (marimo's new notebook, a link, the toolbar's "New tab"):
// it carries the toolbar, typing there keeps the session from the idle reaper, and the editor's
// own shutdown ends the session through us, with the refund shown. scripts/e2e.sh gives 16 GB
// slices a 40 s idle timeout.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, secondsLeft, signIn } from './helpers.mjs';

const USER = process.env.E2E_IDLE_USER ?? 'e2e-idle';

mkdirSync(ARTIFACTS, { recursive: true });

test('a marimo tab of its own carries the toolbar, typing there keeps it alive, its shutdown ends it', async () => {
  const browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // The page's notifications, as the browser would show them (granted; recorded, not drawn).
  await context.addInitScript(() => {
    window.notified = [];
    window.Notification = class {
      constructor(title, options) {
        window.notified.push({ title, body: options?.body ?? '' });
      }
      static get permission() {
        return 'granted';
      }
      static requestPermission() {
        return Promise.resolve('granted');
      }
    };
  });
  const page = await context.newPage();
  let tab;
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    const launched = await launchByApi(page, { slice_mib: 16384 });
    const id = launched.id;
    const stateOf = (on) => on.evaluate(
      async (id) => (await (await fetch(`/api/v1/sessions/${id}`)).json()).state,
      id,
    );
    await readyByApi(page, id);

    // As marimo opens a new notebook: a tab straight into the editor.
    tab = await context.newPage();
    tab.on('pageerror', (e) => console.log('page error:', e.message));
    tab.on('console', (m) => m.type() === 'error' && console.log('console:', m.text()));
    await tab.goto(`${BASE}/s/${id}/?from=own-tab`);
    await tab.waitForURL(new RegExp(`/sessions/${id}\\?path=`));
    await hydrated(tab);
    await tab.getByTestId('time-left').waitFor();
    await tab.getByTestId('idle-left').waitFor();
    assert.match(await tab.locator('iframe.editor').getAttribute('src'), new RegExp(`^/s/${id}/\\?from=own-tab$`));
    await page.close();

    // marimo's own "Create a new notebook" opens a tab of its own: it too carries the toolbar.
    const [created] = await Promise.all([
      context.waitForEvent('page'),
      tab.frameLocator('iframe.editor').getByText('Create a new notebook').click({ timeout: 60_000 }),
    ]);
    await created.waitForURL(new RegExp(`/sessions/${id}\\?path=`), { timeout: 30_000 });
    await hydrated(created);
    await created.getByTestId('time-left').waitFor();
    assert.match(await created.locator('iframe.editor').getAttribute('src'), new RegExp(`^/s/${id}/\\?file=`));
    await created.close();

    // Extend at any time, by any minutes, with its price and the new end.
    const before = await secondsLeft(tab);
    const extend = tab.getByTestId('extend');
    const frameAt = async () => (await tab.locator('iframe.editor').boundingBox()).y;
    const before_y = await frameAt();
    await extend.locator('summary').click();
    await extend.getByLabel('Minutes').waitFor();
    assert.equal(await frameAt(), before_y, 'the open Extend menu does not push the editor down');
    await extend.getByLabel('Minutes').fill('7');
    assert.match(
      await extend.getByTestId('extend-price').innerText(),
      /^Holds [\d.]+ credits? more now; ends at \d{4}-\d\d-\d\d \d\d:\d\d UTC instead of /,
    );
    await extend.getByRole('button', { name: 'Extend' }).click();
    for (let i = 0; (await secondsLeft(tab)) < before + 6 * 60; i += 1) {
      assert.ok(i < 40, 'the end moved by the minutes asked for');
      await tab.waitForTimeout(250);
    }

    // Behind another window, near its idle end: a notification says so. (Playwright tells every
    // page it has the focus, so the page is told otherwise here.)
    await tab.evaluate(() => {
      document.hasFocus = () => false;
    });
    for (let i = 0; ; i += 1) {
      const notified = await tab.evaluate(() => window.notified);
      if (notified.length > 0) {
        assert.equal(notified[0].title, 'Your GPU session ends soon');
        assert.match(notified[0].body, /looks idle and stops in/);
        break;
      }
      assert.ok(i < 60, 'a notification while the page is behind another');
      await tab.waitForTimeout(250);
    }
    await tab.evaluate(() => {
      delete document.hasFocus;
    });

    // Typing there for longer than the idle timeout: the session stays.
    const body = tab.frameLocator('iframe.editor').locator('body');
    await body.waitFor({ timeout: 60_000 });
    // Marks the editor's page: a frame drawn anew (by a heartbeat's answer, say) would lose it.
    const editorFrame = () => tab.frames().find((f) => f.url().includes(`/s/${id}/`));
    await editorFrame().evaluate(() => {
      window.sameFrame = true;
    });
    const until = Date.now() + 55_000;
    while (Date.now() < until) {
      await body.press('Shift');
      await tab.waitForTimeout(2_000);
    }
    assert.equal(await stateOf(tab), 'ready', 'typing in its own tab kept the session');
    assert.equal(await editorFrame().evaluate(() => window.sameFrame), true, 'the editor was never reloaded');
    await tab.screenshot({ path: `${ARTIFACTS}/own-tab.png` });

    // marimo's own Shut Down, as its power button sends it, from inside the editor.
    const frame = editorFrame();
    assert.ok(frame, 'the editor frame');
    // Sent without waiting for its answer: the page moves on (the frame goes) as the stop begins.
    await frame.evaluate((id) => {
      window.shutdownAnswer = fetch(`/s/${id}/api/kernel/shutdown`, { method: 'POST' });
    }, id);
    const ended = tab.getByTestId('session-ended');
    await ended.waitFor({ timeout: 30_000 });
    await ended.getByTestId('session-cost').waitFor({ timeout: 10_000 });
    assert.match(await ended.innerText(), /[Ss]hut down from inside the editor/);
    assert.match(await ended.getByTestId('session-cost').innerText(), /came back to your balance/);
  } catch (error) {
    await (tab ?? page).screenshot({ path: `${ARTIFACTS}/own-tab-failure.png` }).catch(() => {});
    if (tab) console.log('state:', await tab.evaluate(async (u) => (await (await fetch(u)).text()), `/api/v1/sessions/${tab.url().split('/sessions/')[1]?.split('?')[0]}`).catch((e) => e.message));
    if (tab) console.log('DOM:', (await tab.evaluate(() => document.body.innerHTML).catch(() => '')).slice(0, 3000));
    throw error;
  } finally {
    await browser.close();
  }
});

test('"Editor alone" gives the editor a tab of its own, and only that browser\'s tabs', async () => {
  const browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  let id;
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    id = (await launchByApi(page, { slice_mib: 16384 })).id;
    await readyByApi(page, id);
    await page.goto(`${BASE}/sessions/${id}`);
    await hydrated(page);
    const [alone] = await Promise.all([
      context.waitForEvent('page'),
      page.getByTestId('editor-alone').click({ timeout: 60_000 }),
    ]);
    // The editor itself fills the tab: no page of ours around it, so its keys are its own.
    await alone.waitForLoadState('domcontentloaded');
    assert.match(alone.url(), new RegExp(`/s/${id}/$`));
    await alone.getByText('Create a new notebook').waitFor({ timeout: 60_000 });
    assert.equal(await alone.getByTestId('time-left').count(), 0, 'no toolbar around it');
    // It stays alone as it moves within the editor.
    await alone.goto(`${BASE}/s/${id}/?file=alone.py`);
    assert.match(alone.url(), new RegExp(`/s/${id}/\\?file=alone\\.py$`));
    // Another browser of the same user is framed as before.
    const other = await browser.newContext();
    const elsewhere = await other.newPage();
    await signIn(elsewhere, USER, PASSWORD);
    await elsewhere.waitForURL(`${BASE}/`);
    await elsewhere.goto(`${BASE}/s/${id}/?file=alone.py`);
    await elsewhere.waitForURL(new RegExp(`/sessions/${id}\\?path=`));
    await other.close();
  } finally {
    if (id) {
      await page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), id).catch(() => {});
    }
    await browser.close();
  }
});
