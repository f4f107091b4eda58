// An idle session: the countdown runs, the banner warns, "I'm here" resets it, then the reaper
// ends it as idle. scripts/e2e.sh gives 16 GB slices a 40 s idle timeout with a 35 s warning.
// A page sent to the background says so, and the shorter timeout for no page starts at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, signIn } from './helpers.mjs';

// A user of its own, so the other tests' credits and quota are untouched.
const USER = process.env.E2E_IDLE_USER ?? 'e2e-idle';

mkdirSync(ARTIFACTS, { recursive: true });

// "Idle in 0:37" → 37
function seconds(text) {
  const match = text.match(/(\d+):(\d\d)/);
  assert.ok(match, `a countdown in "${text}"`);
  return Number(match[1]) * 60 + Number(match[2]);
}

test('an idle session is warned, kept by "I\'m here", then ended as idle', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    await page.getByRole('radio', { name: /marimo/ }).check();
    await page.getByRole('radio', { name: /^16 GB/ }).check();
    // What the launch page shows while the editor starts (a cold start: no warm editor here),
    // recorded as it changes: the page moves to the session without reloading.
    await page.evaluate(() => {
      window.progressSeen = [];
      new MutationObserver(() => {
        const card = document.querySelector('[data-testid=launch-progress]');
        if (card) {
          const bar = card.querySelector('[role=progressbar]');
          window.progressSeen.push({
            value: Number(bar?.getAttribute('aria-valuenow') ?? -1),
            steps: [...card.querySelectorAll('.steps li')].map((li) => li.textContent),
            heading: card.querySelector('h1')?.textContent ?? '',
          });
        }
      }).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
    });
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.waitForURL(/\/sessions\/[0-9a-f]+$/);
    await hydrated(page);
    await page.frameLocator('[data-testid=editor-frame]').locator('body').waitFor({ timeout: 60_000 });
    const seen = await page.evaluate(() => window.progressSeen);
    assert.ok(seen.length > 0, 'the launch page showed its progress');
    assert.ok(seen.some((s) => /Starting marimo/.test(s.heading)), JSON.stringify(seen));
    assert.ok(seen.some((s) => s.value > 0 && s.value < 100), `a partial bar: ${JSON.stringify(seen)}`);
    assert.ok(
      seen.some((s) => s.steps.some((step) => /Waiting for marimo to answer/.test(step))),
      `the steps stream in: ${JSON.stringify(seen)}`,
    );

    const idle = page.getByTestId('idle-left');
    await idle.waitFor({ timeout: 60_000 });
    const first = seconds(await idle.innerText());
    // The page's clock ticks once a second, so the countdown may show a second more than the timeout.
    assert.ok(first <= 41 && first > 0, `counting down from the 40 s timeout: ${first}`);

    const banner = page.getByTestId('idle-banner');
    await banner.waitFor({ timeout: 30_000 });
    assert.match(await banner.innerText(), /looks idle/);
    const before = seconds(await idle.innerText());
    assert.ok(before <= 36, `the banner shows within the warning time: ${before}`);
    await page.screenshot({ path: `${ARTIFACTS}/idle-banner.png` });

    await banner.getByRole('button', { name: "I'm here" }).click();
    await page.waitForFunction(
      (floor) => {
        const text = document.querySelector('[data-testid=idle-left]')?.textContent ?? '';
        const m = text.match(/(\d+):(\d\d)/);
        return m && Number(m[1]) * 60 + Number(m[2]) > floor;
      },
      before + 2,
      { timeout: 10_000 },
    );

    // Nobody works in it: the reaper ends it within its period after the timeout.
    const ended = page.getByTestId('session-ended');
    await ended.waitFor({ timeout: 90_000 });
    // The reason follows the ended step by a fetch.
    await ended.getByText(/It was idle for too long\./).waitFor({ timeout: 10_000 });
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/idle-failure.png` }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
});

test('a session page sent to the background says so: the away timeout starts at once', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  let id;
  try {
    await signIn(page, USER, PASSWORD);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    // An 8 GB slice: the default policy, 30 minutes at a page and 15 with none.
    ({ id } = await launchByApi(page));
    await readyByApi(page, id);
    await page.goto(`${BASE}/sessions/${id}`);
    await hydrated(page);
    const idleIn = () =>
      page.evaluate(async (id) => {
        const session = await (await fetch(`/api/v1/sessions/${id}`)).json();
        return (session.idle_at_ms - Date.now()) / 60_000;
      }, id);
    const waitUntil = async (done, what) => {
      for (let i = 0; !done(await idleIn()); i += 1) {
        // A guard against waiting for ever, not a measure of speed: the page beats every 5 s.
        assert.ok(i < 240, what);
        await page.waitForTimeout(250);
      }
    };
    // Someone at the page: its next beat carries input, and the full timeout counts.
    await page.getByTestId('time-left').click();
    await waitUntil((m) => m > 25, 'input at a visible page keeps the full timeout');
    // Another tab in front (Playwright keeps every page visible, so the page is told).
    await page.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { get: () => 'hidden', configurable: true });
      document.dispatchEvent(new Event('visibilitychange', { bubbles: true }));
    });
    await waitUntil((m) => m <= 15.1, 'hidden, the page is gone at once: the 15-minute rule');
    // Back in front: the page beats again, and the full timeout is back.
    await page.evaluate(() => {
      delete document.visibilityState;
      document.dispatchEvent(new Event('visibilitychange', { bubbles: true }));
    });
    await waitUntil((m) => m > 25, 'back in sight, the page is there again');
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/idle-hidden-failure.png` }).catch(() => {});
    throw error;
  } finally {
    if (id) {
      await page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), id).catch(() => {});
    }
    await browser.close();
  }
});
