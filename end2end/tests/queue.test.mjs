// A full pool: launches wait in line, each page shows its place live, and the first in line starts
// by itself, in its page, when the slice frees. Runs on the one-slice card of scripts/e2e.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, signIn } from './helpers.mjs';

mkdirSync(ARTIFACTS, { recursive: true });

// Signs in `user` on a new page of its own browser context, launches marimo on the 4 GB slice
// and returns the session's page.
async function launchOnTheSmallCard(browser, user) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await signIn(page, user);
  await page.waitForURL(`${BASE}/`);
  return launchFrom(page);
}

async function launchFrom(page) {
  await page.goto(`${BASE}/`);
  await hydrated(page);
  await page.getByRole('radio', { name: /marimo/ }).check();
  await page.getByRole('radio', { name: /^4 GB/ }).check();
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(/\/sessions\/[0-9a-f]+$/);
  await hydrated(page);
  return page;
}

const editorFrame = (page) => page.getByTestId('editor-frame');

async function stop(page) {
  await page.getByRole('button', { name: /^(Stop|Leave queue)$/ }).click();
  await page.getByTestId('session-ended').waitFor({ timeout: 30_000 });
}

test('a full pool queues launches with their live place in line; the first starts by itself', async () => {
  const browser = await launchBrowser();
  const pages = [];
  try {
    const holder = await launchOnTheSmallCard(browser, 'e2e-queue');
    pages.push(holder);
    await editorFrame(holder).waitFor({ timeout: 60_000 });

    // The same user's second launch, in another tab, and then another user's: both wait.
    const first = await launchFrom(await holder.context().newPage());
    pages.push(first);
    const progress = (page) => page.getByTestId('launch-progress');
    await progress(first).getByText('Waiting for a free GPU slice').waitFor();
    await progress(first).getByText(/position 1 in line/).waitFor();
    const second = await launchOnTheSmallCard(browser, 'e2e-queue-b');
    pages.push(second);
    await progress(second).getByText(/position 2 in line/).waitFor();
    await second.screenshot({ path: `${ARTIFACTS}/queued.png` });

    // The dashboard shows the queued session's place too.
    const dashboard = await holder.context().newPage();
    pages.push(dashboard);
    await dashboard.goto(`${BASE}/`);
    assert.match(await dashboard.getByTestId('queue-position').innerText(), /position 1/);
    // What it waits for, and by when: the running session's end.
    assert.match(
      await dashboard.getByTestId('queue-eta').innerText(),
      /^Waiting for a free 4 GB slice: expected by \d{4}-\d\d-\d\d \d\d:\d\d( UTC)?, when/,
    );
    await hydrated(dashboard);

    // An admin's pool tab lists the line beside the map: both waiting launches, in order.
    const admin = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    pages.push(admin);
    await signIn(admin, 'admin');
    await admin.waitForURL(`${BASE}/`);
    await admin.goto(`${BASE}/admin?tab=pool`);
    await hydrated(admin);
    await admin.getByLabel('Your password').fill(PASSWORD);
    await admin.getByRole('button', { name: 'Confirm' }).click();
    const line = admin.getByTestId('admin-queue');
    await line.getByRole('heading', { name: 'Queued launches (2)' }).waitFor();
    const rows = await line.locator('tbody tr').allInnerTexts();
    assert.match(rows[0], /^1\te2e-queue\tmarimo\t4 GB\t/);
    assert.match(rows[1], /^2\te2e-queue-b\tmarimo\t4 GB\t/);
    await admin.screenshot({ path: `${ARTIFACTS}/admin-queue.png`, fullPage: true });

    const holderId = holder.url().match(/\/sessions\/([0-9a-f]+)$/)[1];
    const holderCard = dashboard.locator(`[data-testid=live-sessions] [data-session-id="${holderId}"]`);
    await holderCard.waitFor();

    // The slice frees: the first in line starts in its open page, the next moves up, live,
    // and the open dashboard follows without a reload.
    await stop(holder);
    await holderCard.waitFor({ state: 'detached', timeout: 20_000 });
    // The admin's open pool tab follows: one launch left in line, now first.
    await line.getByRole('heading', { name: 'Queued launches (1)' }).waitFor({ timeout: 60_000 });
    assert.match(await line.locator('tbody tr').innerText(), /^1\te2e-queue-b\t/);
    await dashboard.getByTestId('queue-position').waitFor({ state: 'detached', timeout: 20_000 });
    await editorFrame(first).waitFor({ timeout: 60_000 });
    await progress(second).getByText(/position 1 in line/).waitFor({ timeout: 30_000 });
    assert.equal(await editorFrame(second).count(), 0, 'the second still waits');

    // An admin's Sessions tab offers the queued launch a Cancel, not a Stop: it has no editor yet.
    await admin.getByRole('link', { name: 'Sessions', exact: true }).click();
    await admin.waitForURL(/tab=sessions/);
    const secondId = second.url().match(/\/sessions\/([0-9a-f]+)$/)[1];
    const queuedRow = admin.locator(`tr[data-session="${secondId}"]`);
    await queuedRow.getByText('queued', { exact: true }).waitFor();
    assert.equal(await queuedRow.getByRole('button', { name: 'Stop' }).count(), 0);
    const firstId = first.url().match(/\/sessions\/([0-9a-f]+)$/)[1];
    await admin.locator(`tr[data-session="${firstId}"]`).getByRole('button', { name: 'Stop' }).waitFor();
    await queuedRow.getByRole('button', { name: 'Cancel' }).click();
    assert.match(admin.dialogs.at(-1) ?? '', /^Cancel e2e-queue-b's queued launch\? It leaves the line/);
    await admin.getByText("Cancelled e2e-queue-b's queued launch; the credits it held went back to them.").waitFor();
    await queuedRow.getByText('ended (admin)').waitFor();
    // Its page follows, and leaving the line cost nothing.
    await second.getByTestId('session-ended').waitFor({ timeout: 30_000 });
    await second.goto(`${BASE}/`);
    assert.equal(await second.getByTestId('credit-balance').innerText(), '100');
    await stop(first);
  } catch (error) {
    for (const [i, page] of pages.entries()) {
      await page.screenshot({ path: `${ARTIFACTS}/queue-failure-${i}.png` }).catch(() => {});
    }
    throw error;
  } finally {
    await browser.close();
  }
});
