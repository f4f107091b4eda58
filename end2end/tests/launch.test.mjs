// Sign in, launch JupyterLab, use it inside the page's iframe (a kernel answers), reload, sign out and back in, stop it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, USER, hydrated, launchBrowser, signIn } from './helpers.mjs';

mkdirSync(ARTIFACTS, { recursive: true });

test('an anonymous visitor is sent to sign in, and a wrong password gets one clear message', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await page.goto(`${BASE}/`);
    await page.waitForURL('**/login');
    await signIn(page, USER, 'not-the-password');
    const error = page.getByRole('alert');
    await error.waitFor();
    assert.match(await error.innerText(), /Wrong user name or password/);
    await signIn(page, 'nobody-by-this-name', 'whatever-it-is');
    await page.getByRole('alert').waitFor();
    assert.match(await page.getByRole('alert').innerText(), /Wrong user name or password/);
  } finally {
    await browser.close();
  }
});

test('signing in works before (or without) the page script: the form posts itself', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  // No wasm at all: the server-rendered form is all there is.
  await page.route('**/*.wasm', (route) => route.abort());
  try {
    await page.goto(`${BASE}/login`);
    await page.getByLabel('User name').fill(USER);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${BASE}/`);
    await page.getByTestId('credit-balance').waitFor();
  } finally {
    await browser.close();
  }
});

test('the launch form offers what the quota and credits allow, and says why not', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    // Signed in, the page moves to the dashboard in place: its chunk may still be on its way.
    await page.getByTestId('slice-choice').first().waitFor();
    assert.equal(await page.title(), 'Dashboard · GPU Sandbox');
    // The pool strip in words: each slice by its place on its card and its state, with a legend.
    await page.getByTestId('pool-legend').waitFor();
    const slotTitles = await page.locator('.gpu .slot').evaluateAll((els) => els.map((e) => e.title));
    assert.ok(
      slotTitles.length > 0 && slotTitles.every((t) => /^Slice \d+ of \d+ · [\d.]+ GB · (in use|free|.+ ready to launch)$/.test(t)),
      slotTitles.join(' | '),
    );
    // The default quota (16 GB at once) refuses a whole 48 GB card: greyed, with the reason.
    const whole = page.locator('[data-testid="slice-choice"]:has(input[value="49152"])');
    assert.match(await whole.innerText(), /Whole GPU · 48 GB/);
    assert.ok(await whole.locator('input').isDisabled(), 'the whole card is not offered');
    assert.match(await whole.getByTestId('slice-refused').innerText(), /16 GB of GPU memory/);
    const eight = page.locator('[data-testid="slice-choice"]:has(input[value="8192"])');
    assert.ok(await eight.locator('input').isEnabled());
    // Prices by the hour, one credit singular (the default 0.125 credits per GiB-hour).
    assert.match(await eight.innerText(), /(^|[^\d.])1 credit\/h/);
    assert.match(await whole.innerText(), /(^|[^\d.])6 credits\/h/);

    const duration = page.getByLabel('Duration (minutes)');
    const launch = page.getByRole('button', { name: 'Launch' });
    // Empty is said so, never launched as a default.
    await duration.fill('');
    await page.getByTestId('launch-refused').filter({ hasText: 'Enter a duration in whole minutes' }).waitFor();
    assert.ok(await launch.isDisabled());
    // Keystrokes stay as typed, and what is wrong is said: nothing is read as 5, 15 or 3.
    for (const [typed, why] of [['-5', 'cannot be negative'], ['1.5', 'Whole minutes only'], ['1e3', '1000, not 1e3']]) {
      await duration.fill('');
      await duration.pressSequentially(typed);
      assert.equal(await duration.inputValue(), typed);
      await page.getByTestId('launch-refused').filter({ hasText: why }).waitFor();
      assert.ok(await launch.isDisabled(), typed);
      assert.equal(await duration.getAttribute('aria-invalid'), 'true');
    }
    // Any whole minute in range, priced as the server will hold it.
    await duration.fill('47');
    await page.getByTestId('launch-total').filter({ hasText: /^Holds [\d.]+ credits? now/ }).waitFor();
    assert.ok(await launch.isEnabled());
    assert.equal(await page.getByTestId('launch-refused').count(), 0);
    await duration.fill('100000');
    await page.getByTestId('launch-refused').filter({ hasText: /minutes for this size/ }).waitFor();
    assert.ok(await launch.isDisabled());
    // Leaving the field brings it back to the longest.
    await duration.blur();
    await page.getByTestId('launch-refused').waitFor({ state: 'detached' });
    assert.ok(Number(await duration.inputValue()) <= 480);
  } finally {
    await browser.close();
  }
});

test('launch JupyterLab, see it embedded, reload, reopen after signing in again, stop it', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    const balance = page.getByTestId('credit-balance');
    await balance.waitFor();
    assert.equal(await balance.innerText(), '100');
    await page.getByText('no limit').first().waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/dashboard.png` });

    // The launch button works through the hydrated page (a submit handler, not a form post).
    await page.getByRole('radio', { name: /JupyterLab/ }).check();
    await page.getByRole('radio', { name: /8 GB/ }).first().check();
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.waitForURL(/\/sessions\/[0-9a-f]+$/);
    const sessionUrl = page.url();

    const frame = page.frameLocator('[data-testid=editor-frame]');
    await frame.locator('.jp-LabShell, #jp-main-dock-panel').first().waitFor({ timeout: 120_000 });
    // The progress line that stood in for the blank frame is gone once the editor's page loaded.
    const opening = page.getByRole('progressbar', { name: /^Opening JupyterLab/ });
    await opening.waitFor({ state: 'detached', timeout: 30_000 });
    await page.getByTestId('time-left').waitFor();
    assert.match(await page.getByTestId('time-left').innerText(), /Time left \d+:\d\d/);
    await page.screenshot({ path: `${ARTIFACTS}/session.png` });

    // A reload (or a new visit) finds the running session again.
    await page.reload();
    await frame.locator('.jp-LabShell, #jp-main-dock-panel').first().waitFor({ timeout: 60_000 });
    await hydrated(page);
    await opening.waitFor({ state: 'detached', timeout: 30_000 });
    await page.goto(`${BASE}/`);
    const card = page.getByTestId('session-card').first();
    await card.waitFor();
    assert.match(await card.innerText(), /ready/);

    // Signing out shuts the editor to this browser at once; signing in again reopens it.
    const editorUrl = await page.evaluate(async (url) => {
      const id = url.split('/').pop();
      const view = await fetch(`/api/v1/sessions/${id}`).then((r) => r.json());
      return view.url;
    }, sessionUrl);
    assert.match(editorUrl, /^\/s\/[0-9a-f]+\//);
    await hydrated(page);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL('**/login');
    await page.goto(`${BASE}${editorUrl}`);
    await page.waitForURL(/\/login\?next=/);
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    await page.getByTestId('session-card').first().getByRole('link', { name: 'Open' }).click();
    await page.waitForURL(sessionUrl);
    await frame.locator('.jp-LabShell, #jp-main-dock-panel').first().waitFor({ timeout: 60_000 });
    await hydrated(page);

    // The editor works from the page: a notebook's kernel answers over the proxied WebSocket,
    // which the proxy lets through from our own origin only.
    await frame.locator('.jp-LauncherCard').first().click({ timeout: 60_000 });
    // Typed before the kernel is up, a cell runs on nothing.
    await frame.getByText(/\(ipykernel\) \| Idle/).first().waitFor({ timeout: 60_000 });
    const input = frame.locator('.jp-Cell .cm-content').first();
    await input.click({ timeout: 60_000 });
    await page.keyboard.type('6*7');
    await page.keyboard.press('Shift+Enter');
    await frame.locator('.jp-OutputArea-output', { hasText: '42' }).first().waitFor({ timeout: 60_000 });
    // Saved, so that leaving the page asks nothing.
    await page.keyboard.press('Control+s');
    // The first save of an untitled notebook offers a name.
    await frame.locator('.jp-Dialog-button.jp-mod-accept').click({ timeout: 30_000 });
    await frame.locator('.jp-mod-dirty').first().waitFor({ state: 'detached', timeout: 30_000 });
    await page.screenshot({ path: `${ARTIFACTS}/kernel.png` });
    // Set up for us: JupyterLab asks nothing about news or updates.
    assert.equal(await frame.getByText(/Jupyter news|check for updates/i).count(), 0, 'no news or update prompt');

    // Its use under the toolbar, drawn from the readings the API reports: the slice on its
    // card's scale, and as many points on the RAM sparkline as minutes with a RAM reading.
    const id = sessionUrl.split('/').pop();
    const bar = page.getByTestId('slice-bar');
    await bar.waitFor({ timeout: 30_000 });
    assert.equal(await bar.getAttribute('data-slice'), '8192');
    assert.match(await page.getByTestId('session-spent').innerText(), /^Spent [\d.]+ credits? · [\d.]+ credits? an hour$/);
    const readings = () => page.evaluate(async (id) => (await fetch(`/api/v1/sessions/${id}/readings`)).json(), id);
    // The page reads them on load and each minute; the API's count moves only at a minute's turn.
    for (let i = 0; ; i += 1) {
      const withRam = (await readings()).readings.filter((r) => r.ram_mib !== null).length;
      const drawn = Number(await page.getByTestId('spark-ram').getAttribute('data-points'));
      if (withRam > 0 && drawn === withRam) break;
      assert.ok(i < 150, `the RAM sparkline draws the API's ${withRam} readings (it has ${drawn})`);
      await page.waitForTimeout(1000);
    }
    await page.screenshot({ path: `${ARTIFACTS}/session-usage.png` });

    await page.getByRole('button', { name: 'Stop' }).click();
    assert.match(page.dialogs.at(-1) ?? '', /^Stop this session\? .*not saved.* is lost/, 'Stop asks first, saying what is lost');
    const ended = page.getByTestId('session-ended');
    await ended.waitFor({ timeout: 30_000 });
    await ended.getByText('You stopped it.').waitFor({ timeout: 10_000 });
    const endedPage = page.url();
    // What it cost and what came back, in credits.
    const cost = ended.getByTestId('session-cost');
    await cost.waitFor({ timeout: 10_000 });
    assert.match(
      await cost.innerText(),
      /^Charged [\d.]+ credits? for the time it ran; [\d.]+ credits? of the [\d.]+ held came back/,
    );

    await page.goto(`${BASE}/`);
    await page.getByText('No session is running').waitFor();
    // The dashboard's pictures: 30 days held against busy, today's holding her slice; and the
    // stopped session's cost among the bars, as the API reports it.
    const days = page.getByTestId('my-usage-days');
    assert.equal(await days.getAttribute('data-days'), '30');
    assert.ok(Number(await days.locator('g.day').last().getAttribute('data-allocated')) > 0, 'today held a slice');
    const charged = await page.evaluate(async (id) => (await (await fetch(`/api/v1/sessions/${id}`)).json()).cost.charged, id);
    const costs = page.getByTestId('session-costs').locator('.cost-row');
    assert.ok(
      (await costs.evaluateAll((rows) => rows.map((r) => Number(r.dataset.value)))).includes(charged),
      `a bar of ${charged} milli-credits`,
    );
    const after = await page.getByTestId('credit-balance').innerText();
    assert.ok(Number(after) < 100 && Number(after) > 99, `charged for the minutes used, refunded the rest: ${after}`);

    // From the end page, the same launch again in one click: a new session, then stopped.
    await page.goto(endedPage);
    await hydrated(page);
    await page.getByTestId('launch-again').click();
    await page.waitForURL((url) => url.pathname.startsWith('/sessions/') && url.href !== endedPage, { timeout: 30_000 });
    await page.getByTestId('editor-frame').waitFor({ timeout: 90_000 });
    const againId = new URL(page.url()).pathname.split('/').pop();
    // Stopped from its card on the dashboard: it leaves the live list for the recent sessions,
    // and what was typed in the launch form stays.
    await page.goto(`${BASE}/`);
    await hydrated(page);
    const typed = page.getByLabel('Duration (minutes)');
    await typed.fill('7');
    const liveCard = page.getByTestId('live-sessions').locator(`[data-session-id="${againId}"]`);
    await liveCard.getByRole('button', { name: 'Stop' }).click();
    assert.match(page.dialogs.at(-1) ?? '', /^Stop this session\?/, 'the card asks first too');
    await page.getByText('No session is running').waitFor({ timeout: 30_000 });
    assert.equal(await typed.inputValue(), '7', 'the launch form is left as typed');
    const recent = page.locator('details.history', { hasText: 'Recent sessions' });
    await recent.locator('summary').click();
    const past = recent.locator(`[data-session-id="${againId}"]`);
    await past.getByTestId('session-when').waitFor();
    assert.match(await past.innerText(), /Ended: stopped by you/);
    // One minute-count: the time in use is the time charged.
    const pastWords = await past.innerText();
    const inUse = pastWords.match(/in use (\d+) min/)?.[1];
    assert.ok(inUse && pastWords.includes(`for ${inUse} min`), `the minutes in use are the minutes charged: ${pastWords}`);
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/failure.png` }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
});
