// Every page through axe-core (WCAG 2 A and AA rules, colour contrast included): no serious or
// critical violation. And the session toolbar at a phone's width keeps Stop on the screen.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, signIn } from './helpers.mjs';

const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
// A user of its own: its session is launched and stopped here.
const USER = 'e2e-target';

mkdirSync(ARTIFACTS, { recursive: true });

// The page's serious and critical violations, the editor's own frame left out (not ours).
async function violations(page) {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    const result = await window.axe.run(
      { exclude: [['iframe.editor']] },
      { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } },
    );
    return result.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
  });
  return found;
}

// Every page's findings, told together at the end: one run shows them all.
const found = [];

async function check(page, name) {
  await hydrated(page);
  for (const v of await violations(page)) found.push(`${name}: ${v}`);
  // Each page as it was checked, kept with the run's artifacts.
  const file = name.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase();
  await page.screenshot({ path: `${ARTIFACTS}/page-${file}.png`, fullPage: true });
}

function nothingFound() {
  const all = found.splice(0);
  assert.deepEqual(all, [], all.join('\n'));
}

test('every page passes axe-core without a serious violation, in light and dark', async () => {
  const browser = await launchBrowser();
  try {
  for (const colorScheme of ['light', 'dark']) {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, colorScheme });
    try {
      // Everything the sign-in page asks for is there (its icon included).
      const missing = [];
      const record = (r) => r.status() >= 400 && r.url().startsWith(BASE) && missing.push(`${r.status()} ${r.url()}`);
      page.on('response', record);
      await page.goto(`${BASE}/login`);
      await check(page, `sign-in (${colorScheme})`);
      await page.waitForLoadState('networkidle');
      page.off('response', record);
      assert.deepEqual(missing, [], missing.join('\n'));
      await signIn(page, 'admin');
      await page.waitForURL(`${BASE}/`);
      // Moved in place: the dashboard's chunk may still be on its way.
      await page.waitForFunction(() => document.title.startsWith('Dashboard'));
      await check(page, `dashboard (${colorScheme})`);
      for (const path of ['/tokens', '/account']) {
        await page.goto(`${BASE}${path}`);
        await check(page, `${path} (${colorScheme})`);
      }
      await page.goto(`${BASE}/admin`);
      await hydrated(page);
      await check(page, `admin confirmation (${colorScheme})`);
      await page.getByLabel('Your password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Confirm' }).click();
      await page.locator('tr[data-user]').first().waitFor();
      for (const tab of ['users', 'sessions', 'pool', 'images', 'usage', 'promotions', 'audit', 'settings']) {
        await page.goto(`${BASE}/admin?tab=${tab}`);
        await hydrated(page);
        await page.waitForLoadState('networkidle');
        await check(page, `admin ${tab} (${colorScheme})`);
        if (tab === 'users') {
          // What the users tab keeps folded: the CSV form, with a checked file's problems, and
          // a row's menu.
          const bulk = page.getByTestId('bulk-users');
          await bulk.locator('summary').click();
          await bulk.getByLabel('or its lines').fill('a11y-csv,boss\n');
          await bulk.getByRole('button', { name: 'Check' }).click();
          await bulk.getByTestId('bulk-problems').waitFor();
          await page.locator('tr[data-user] details.row-menu > summary').first().click();
          await check(page, `admin users, unfolded (${colorScheme})`);
        }
        if (tab === 'promotions') {
          // On on this server (a registry is set): no "promotion is off" notice.
          assert.equal(await page.getByTestId('promotion-off').count(), 0);
        }
        if (tab === 'images') {
          // The local runtime runs no images: the kube defaults are not listed as in use.
          assert.equal(await page.getByText('default (configuration: kube.images)').count(), 0);
        }
      }
      // On a phone the admin pages never scroll sideways: wide tables scroll in their own box.
      await page.setViewportSize({ width: 390, height: 844 });
      for (const tab of ['users', 'sessions', 'pool', 'usage', 'audit']) {
        await page.goto(`${BASE}/admin?tab=${tab}`);
        await hydrated(page);
        await page.waitForLoadState('networkidle');
        const wide = await page.evaluate(() => document.documentElement.scrollWidth);
        assert.ok(wide <= 390, `admin ${tab} at 390 px is ${wide} px wide`);
      }
      await page.screenshot({ path: `${ARTIFACTS}/admin-390-${colorScheme}.png` });
    } catch (error) {
      await page.screenshot({ path: `${ARTIFACTS}/a11y-failure-${colorScheme}.png` }).catch(() => {});
      throw error;
    } finally {
      await page.close();
    }
  }
    nothingFound();
  } finally {
    await browser.close();
  }
});

// "2026-12-01 08:00" for `ms` on a clock `east` minutes ahead of UTC, as the pages write it.
function zoned(ms, east) {
  const d = new Date(ms + east * 60_000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())}`;
}

test('a session page passes axe-core, and at 390 px its toolbar keeps Stop on screen', async () => {
  const browser = await launchBrowser();
  // In India's zone (UTC+5:30, no daylight saving time): the pages' times are the reader's.
  const page = await browser.newPage({ viewport: { width: 390, height: 844 }, timezoneId: 'Asia/Kolkata' });
  let launched;
  try {
    await signIn(page, USER);
    await page.waitForURL(`${BASE}/`);
    launched = await launchByApi(page);
    await page.goto(`${BASE}/sessions/${launched.id}`);
    await page.getByTestId('editor-frame').waitFor({ timeout: 60_000 });
    await check(page, 'session page at 390 px');
    await page.screenshot({ path: `${ARTIFACTS}/session-390.png` });
    // Its tab says which session it is.
    assert.match(await page.title(), /^marimo · 8 GB — GPU Sandbox$/i);
    const stop = page.getByRole('button', { name: 'Stop' });
    const box = await stop.boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 390, `Stop within the screen: ${JSON.stringify(box)}`);
    await stop.click();
    await page.getByTestId('session-ended').waitFor({ timeout: 30_000 });
    await check(page, 'ended session page');

    // The dashboard at a phone's width, light and dark: the charts' words at 11 px or more and
    // inside the screen, the balance line's axes labelled, the times on the reader's clock.
    await page.goto(`${BASE}/`);
    for (const colorScheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme });
      await check(page, `dashboard at 390 px (${colorScheme})`);
    }
    const words = await page.evaluate(() =>
      [...document.querySelectorAll('.cost-bars .cost-label, .cost-bars .cost-value, .balance-line .y-ticks span, .balance-line .x-ticks > *, .balance-line .y-title, .balance-line .x-title')].map((e) => {
        const box = e.getBoundingClientRect();
        return { text: e.textContent, px: parseFloat(getComputedStyle(e).fontSize), left: box.left, right: box.right, clipped: e.scrollWidth > e.clientWidth + 1 };
      }),
    );
    assert.ok(words.some((w) => w.text === 'Credits'), 'the balance line names its vertical axis');
    assert.ok(words.filter((w) => w.text.includes('·')).length > 0, `a cost bar for the stopped session: ${JSON.stringify(words)}`);
    for (const w of words) {
      assert.ok(w.px >= 11, `"${w.text}" at ${w.px} px`);
      assert.ok(w.left >= 0 && w.right <= 390 && !w.clipped, `"${w.text}" inside the screen: ${JSON.stringify(w)}`);
    }
    const times = await page.evaluate(() =>
      [...document.querySelectorAll('time.local')].map((t) => ({ ms: Number(t.dataset.ms), text: t.textContent.trim(), title: t.title })),
    );
    assert.ok(times.length > 0, 'the recent sessions and the credit history say when');
    for (const t of times) {
      assert.equal(t.text, zoned(t.ms, 330), 'on the reader\'s clock');
      assert.equal(t.title, `${zoned(t.ms, 0)} UTC`, 'UTC in the title');
    }
    nothingFound();
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/a11y-session-failure.png` }).catch(() => {});
    // The other tests' user: its session does not outlive this one.
    if (launched?.id) {
      await page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), launched.id).catch(() => {});
    }
    throw error;
  } finally {
    await browser.close();
  }
});
