// A parked session in the browser: with no work for a minute (scripts/e2e.sh parks 12 GB slices
// after 60 s), its GPU slice goes back to the pool while its page keeps the editor's frame with a
// banner; a browser request is answered "parked" and does not wake it, and JupyterLab's own
// polling meanwhile does not make it show "Server Connection Error" (it does on a 503, as
// JupyterHub answers for a stopped server); "Resume" brings it back, and the same editor answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, signIn } from './helpers.mjs';

// A user of its own, so the other tests' credits and quota are untouched.
const USER = process.env.E2E_PARK_USER ?? 'e2e-park';

mkdirSync(ARTIFACTS, { recursive: true });

test('a quiet session parks, keeps its editor on the page, and resumes', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  let id;
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    ({ id } = await launchByApi(page, { editor: 'jupyterlab', slice_mib: 12288, duration_minutes: 30 }));
    await readyByApi(page, id);
    await page.goto(`${BASE}/sessions/${id}`);
    await hydrated(page);
    const frame = page.frameLocator('[data-testid=editor-frame]');
    await frame.locator('.jp-LabShell').waitFor({ timeout: 60_000 });
    // A page in sight beats at once: the full timeout counts from the start, not the 15 minutes
    // of a session with no page open.
    await page.waitForFunction(() => {
      const m = (document.querySelector('[data-testid=idle-left]')?.textContent ?? '').match(/(\d+):(\d\d)/);
      return m && Number(m[1]) >= 25;
    }, null, { timeout: 30_000 });
    const state = (id) =>
      page.evaluate(async (id) => (await (await fetch(`/api/v1/sessions/${id}`)).json()).state, id);

    // Nobody touches anything: parked after the minute (plus a reaper pass), said on the page.
    const banner = page.getByTestId('parked-banner');
    // JupyterLab's listings of kernels, sessions and terminals, answered "parked".
    const parkedPolls = [];
    page.on('response', (answer) => {
      if (answer.status() === 409 && /\/api\/(kernels|sessions|terminals)\b/.test(answer.url())) {
        parkedPolls.push(answer.url());
      }
    });
    // A guard against waiting for ever, not a measure of speed.
    await banner.waitFor({ timeout: 180_000 });
    assert.equal(await state(id), 'parked');
    assert.match(await page.getByTestId('state-chip').innerText(), /parked/);
    assert.equal(await page.locator('[data-testid=editor-frame]').count(), 1, 'the editor stays on the page');
    const asked = await page.evaluate(async (id) => {
      const answer = await fetch(`/s/${id}/api/status`);
      return [answer.status, (await answer.json()).error];
    }, id);
    assert.deepEqual(asked, [409, 'parked'], 'a browser request does not wake it');
    // Its pollers ask a few times (every 10 s or so): no dialog says the server is gone.
    for (let waited = 0; parkedPolls.length < 3 && waited < 120_000; waited += 500) {
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    assert.ok(parkedPolls.length >= 3, `JupyterLab polled while parked: ${parkedPolls}`);
    assert.equal(await state(id), 'parked', 'its polling did not wake it');
    const dialogs = frame.locator('.jp-Dialog');
    assert.equal(await dialogs.count(), 0, 'no "Server Connection Error" while parked');
    await page.screenshot({ path: `${ARTIFACTS}/parked.png` });

    await banner.getByRole('button', { name: 'Resume' }).click();
    await banner.waitFor({ state: 'detached', timeout: 30_000 });
    assert.equal(await state(id), 'ready');
    const status = await page.evaluate(async (id) => (await fetch(`/s/${id}/api/status`)).status, id);
    assert.equal(status, 200, 'the same editor answers again');
    assert.equal(await dialogs.count(), 0, 'nothing for the person to close after the resume');
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/parked-failure.png` }).catch(() => {});
    throw error;
  } finally {
    if (id) {
      await page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), id).catch(() => {});
    }
    await browser.close();
  }
});
