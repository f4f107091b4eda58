// The pages follow what happens without a reload, and only where it shows: an Extend moves the
// session's end but leaves its editor's frame alone; a Stop frees the launch form at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, secondsLeft, signIn } from './helpers.mjs';

// A user of its own: these tests fill the default quota (2 sessions) and spend credits.
const USER = 'e2e-live';

mkdirSync(ARTIFACTS, { recursive: true });

const stopByApi = (page, id) => page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), id);

test('an Extend moves the end without reloading the editor', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  let id;
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    ({ id } = await launchByApi(page));
    await readyByApi(page, id);
    await page.goto(`${BASE}/sessions/${id}`);
    await hydrated(page);
    await page.frameLocator('iframe.editor').getByText('Create a new notebook').waitFor({ timeout: 60_000 });
    // Marks the editor's page: a frame navigated again, or drawn anew, loses it.
    const frame = page.frames().find((f) => f.url().includes(`/s/${id}/`));
    await frame.evaluate(() => {
      window.__marker = 1;
    });

    const before = await secondsLeft(page);
    const extend = page.getByTestId('extend');
    await extend.locator('summary').click();
    // What is typed stays, and a misread value is never extended by.
    const minutes = extend.getByLabel('Minutes');
    await minutes.fill('');
    await minutes.pressSequentially('1e3');
    assert.equal(await minutes.inputValue(), '1e3');
    await extend.getByTestId('extend-price').filter({ hasText: '1000, not 1e3' }).waitFor();
    assert.ok(await extend.getByRole('button', { name: 'Extend' }).isDisabled());
    await minutes.fill('10');
    await extend.getByRole('button', { name: 'Extend' }).click();
    for (let i = 0; (await secondsLeft(page)) < before + 9 * 60; i += 1) {
      assert.ok(i < 40, 'the page shows the new end');
      await page.waitForTimeout(250);
    }
    // What follows the answer (the stream's step, the fetch after it) has come by now.
    await page.waitForTimeout(3_000);
    assert.ok(!frame.isDetached(), 'the editor frame was not drawn anew');
    assert.equal(await frame.evaluate(() => window.__marker), 1, 'the editor was not reloaded');
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/live-extend-failure.png` }).catch(() => {});
    throw error;
  } finally {
    if (id) await stopByApi(page, id).catch(() => {});
    await browser.close();
  }
});

test('a Stop from its card enables Launch again without a reload', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const ids = [];
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    // At the default limit of 2 sessions.
    for (let i = 0; i < 2; i += 1) ids.push((await launchByApi(page)).id);
    for (const id of ids) await readyByApi(page, id);
    await page.goto(`${BASE}/`);
    await hydrated(page);
    await page.getByTestId('slice-choice').first().waitFor();
    const launch = page.getByRole('button', { name: 'Launch' });
    await page.getByTestId('launch-refused').filter({ hasText: 'Stop one first' }).waitFor();
    assert.ok(await launch.isDisabled());
    assert.match(await page.getByTestId('quota').innerText(), /\(2 in use\)/);

    const card = page.getByTestId('live-sessions').locator(`[data-session-id="${ids[0]}"]`);
    await card.getByRole('button', { name: 'Stop' }).click();
    await card.waitFor({ state: 'detached', timeout: 30_000 });
    // No page reload: before the fix no reload of the page's data (the stop's or the periodic one)
    // reached the form, so this fails then however long it waits; no time budget to miss when busy.
    await page.waitForFunction(
      () => !document.querySelector('form.launch button[type=submit]').disabled,
      null,
      { timeout: 30_000 },
    );
    assert.equal(await page.getByTestId('launch-refused').count(), 0);
    assert.match(await page.getByTestId('quota').innerText(), /\(1 in use\)/);
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/live-stop-failure.png` }).catch(() => {});
    throw error;
  } finally {
    for (const id of ids) await stopByApi(page, id).catch(() => {});
    await browser.close();
  }
});
