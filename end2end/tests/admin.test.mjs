// The admin pages in the browser: grant credits, lock and unlock a user, search, the pool and the
// audit log; a user who is not an admin is refused.
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, signIn } from './helpers.mjs';

const TARGET = 'e2e-target';

// Opens a row's menu (its actions but the grant), unless it is open already; one row's at a time.
async function openMenu(row) {
  const menu = row.locator('details.row-menu');
  if ((await menu.getAttribute('open')) === null) {
    await menu.locator(':scope > summary').click();
  }
}

async function closeMenu(row) {
  const menu = row.locator('details.row-menu');
  if ((await menu.getAttribute('open')) !== null) {
    await menu.locator(':scope > summary').click();
  }
}

// Opens the row's quota editor, whether or not it is open already (a reload draws it anew).
async function openQuota(row) {
  await openMenu(row);
  const details = row.locator('details.quota');
  if ((await details.getAttribute('open')) === null) {
    await details.locator('summary').click();
  }
}

async function balanceOf(row) {
  return parseFloat(await row.getByTestId('balance').innerText());
}

test('an admin grants credits, locks and unlocks a user, and finds it all in the audit log', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await signIn(page, 'admin');
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    await page.getByRole('link', { name: 'Admin', exact: true }).click();
    await page.waitForURL(`${BASE}/admin`);
    await hydrated(page);
    // The cookie alone does not open the admin pages: the password does, for a while.
    await page.getByLabel('Your password').fill('not-the-password');
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('alert').filter({ hasText: 'not your password' }).waitFor();
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.locator('tr[data-user]').first().waitFor();

    // Another user's session: listed among the live ones, and stopped by the admin.
    const owner = await browser.newPage();
    await signIn(owner, TARGET);
    await owner.waitForURL(`${BASE}/`);
    const launched = await launchByApi(owner);
    // Ready before the table is read, so that its editor can be entered.
    await readyByApi(owner, launched.id);
    // The pool map draws every slot of each card once, and the one this session holds carries
    // its user's name.
    await page.getByRole('link', { name: 'Pool', exact: true }).click();
    await page.waitForURL(/tab=pool/);
    const map = page.getByTestId('pool-map');
    await map.waitFor();
    const slotsListed = await page.locator('section[data-gpu] tbody tr').count();
    assert.ok(slotsListed > 0);
    assert.equal(await map.locator('g.slice').count(), slotsListed, 'one slice in the picture per slot');
    const held = map.locator(`g.slice[data-status="used"][data-user="${TARGET}"]`);
    assert.equal(await held.count(), 1);
    assert.match(await held.locator('title').textContent(), new RegExp(`^${TARGET} · marimo`));
    await page.screenshot({ path: `${ARTIFACTS}/admin-pool-map.png`, fullPage: true });
    await page.getByRole('link', { name: 'Sessions', exact: true }).click();
    await page.waitForURL(/tab=sessions/);
    const session = page.locator(`tr[data-session="${launched.id}"]`);
    await session.waitFor();
    assert.match(await session.innerText(), new RegExp(TARGET));
    // Each row says which session it is, how long it has run and what it cost so far.
    assert.equal(await session.getByTestId('session-id').innerText(), launched.id.slice(0, 8));
    assert.match(await session.getByTestId('session-ran').innerText(), /^\d+ min$/);
    assert.match(await session.getByTestId('session-cost').innerText(), /^[\d.]+ credits? so far$/);
    // Entering their editor is an explicit, audited step, and for an admin token only: the
    // admin's browser stays out, since the user's page would run in it with the admin's cookie.
    const editorUrl = `${BASE}/s/${launched.id}/`;
    assert.equal((await page.request.get(editorUrl)).status(), 404, 'not without a grant');
    await session.getByRole('button', { name: 'Enter editor' }).click();
    const enter = session.getByTestId('enter-editor');
    await enter.waitFor();
    assert.match(await enter.innerText(), new RegExp(`/s/${launched.id}/`));
    assert.equal((await page.request.get(editorUrl)).status(), 404, 'never with the cookie');
    // Its owner is told, in the session's toolbar.
    await owner.goto(`${BASE}/sessions/${launched.id}`);
    const told = owner.getByTestId('admin-access');
    await told.waitFor();
    assert.match(await told.innerText(), /admin \(admin\) may reach this editor until/);
    await session.getByRole('button', { name: 'Stop' }).click();
    await session.getByText('ended (admin)').waitFor();
    assert.match(await session.getByTestId('session-cost').innerText(), /^[\d.]+ credits?$/, 'charged at its end');
    assert.match(page.dialogs.at(-1) ?? '', new RegExp(`^Stop ${TARGET}'s session\\? .*not saved is lost`));
    const seen = await owner.evaluate(
      async (id) => (await fetch(`/api/v1/sessions/${id}`)).json(),
      launched.id,
    );
    assert.equal(seen.end_reason, 'admin');
    assert.match(seen.detail, /admin/);
    // Its owner's page says why once, in the stop's own words, and still offers a launch.
    const why = owner.getByTestId('end-reason');
    await why.waitFor();
    assert.equal(await why.innerText(), 'Stopped by the admin admin.');
    assert.equal(await owner.getByText(/stopped (it|by)/i).count(), 1, 'said once');
    await owner.getByTestId('launch-again').waitFor();
    await owner.close();
    // The Users tab's label carries its count of open asks, when there are some.
    await page.getByTestId('tab-users').click();
    await page.waitForURL(/tab=users/);

    const row = page.locator(`tr[data-user="${TARGET}"]`);
    await row.waitFor();
    const before = await balanceOf(row);
    // Typed into another row and not saved: kept when the grant below reloads the table.
    const mine = page.locator('tr[data-user="admin"]');
    await mine.getByLabel('Credits to grant admin').fill('7');
    await openQuota(mine);
    await mine.getByLabel('Minutes').fill('45');
    // Its menu closed again: it would cover the rows below.
    await closeMenu(mine);
    await row.getByLabel(`Credits to grant ${TARGET}`).fill('2.5');
    await row.getByLabel(`Note for ${TARGET}`).fill('e2e grant');
    await row.getByRole('button', { name: 'Grant' }).click();
    const granted = page.getByRole('status').filter({ hasText: 'Granted' });
    await granted.waitFor();
    assert.match(await granted.innerText(), new RegExp(`now ${before + 2.5} credits`));
    await page.waitForFunction(
      ([user, expected]) =>
        parseFloat(document.querySelector(`tr[data-user="${user}"] [data-testid="balance"]`)?.innerText) === expected,
      [TARGET, before + 2.5],
    );
    assert.equal(await row.getByLabel(`Credits to grant ${TARGET}`).inputValue(), '', 'a saved grant empties its row');
    assert.equal(await row.getByLabel(`Note for ${TARGET}`).inputValue(), '');
    assert.equal(await mine.getByLabel('Credits to grant admin').inputValue(), '7', 'another row keeps what was typed');
    assert.notEqual(await mine.locator('details.quota').getAttribute('open'), null, 'its quota editor stays open');
    assert.equal(await mine.getByLabel('Minutes').inputValue(), '45');
    await mine.getByLabel('Credits to grant admin').fill('');
    await openMenu(mine);
    await mine.getByLabel('Minutes').fill('');
    await closeMenu(mine);

    // Taking back more than there is: refused, with the reason, and nothing changes.
    await row.getByLabel(`Credits to grant ${TARGET}`).fill(`-${before + 100}`);
    await row.getByRole('button', { name: 'Grant' }).click();
    const refused = page.getByRole('alert').filter({ hasText: 'more than the balance' });
    await refused.waitFor();
    assert.equal(await balanceOf(row), before + 2.5);
    assert.equal(
      await row.getByLabel(`Credits to grant ${TARGET}`).inputValue(),
      `-${before + 100}`,
      'a refused grant keeps what was typed',
    );

    // Locked with a session's page open: the page says why, once, and offers nothing to launch.
    const locked = await browser.newPage();
    await signIn(locked, TARGET);
    await locked.waitForURL(`${BASE}/`);
    const doomed = await launchByApi(locked);
    await locked.goto(`${BASE}/sessions/${doomed.id}`);
    await hydrated(locked);
    await openMenu(row);
    await row.getByRole('button', { name: `Lock ${TARGET}`, exact: true }).click();
    assert.match(page.dialogs.at(-1) ?? '', new RegExp(`^Lock ${TARGET}\\? They are signed out everywhere`));
    await row.getByText('locked', { exact: true }).waitFor();
    const lockedWhy = locked.getByTestId('end-reason');
    await lockedWhy.waitFor({ timeout: 30_000 });
    assert.equal(await lockedWhy.innerText(), 'The account was locked; unused credits were refunded.');
    await locked.getByTestId('signed-out').waitFor();
    assert.equal(await locked.getByTestId('launch-again').count(), 0);
    assert.equal(await locked.getByText(/locked/).count(), 1, 'said once');
    assert.equal(await locked.getByText(/refunded|returned/).count(), 1, 'the refund said once');
    await locked.screenshot({ path: `${ARTIFACTS}/session-locked.png` });
    await locked.close();
    // Locked: the account cannot sign in.
    const other = await browser.newPage();
    await signIn(other, TARGET);
    await other.getByRole('alert').waitFor();
    await other.close();
    await openMenu(row);
    await row.getByRole('button', { name: `Unlock ${TARGET}`, exact: true }).click();
    await row.getByText('locked', { exact: true }).waitFor({ state: 'detached' });

    // Quota: an override shows in the row's summary; emptied, the default is back.
    await openQuota(row);
    await row.getByLabel('Sessions').fill('0');
    await row.getByRole('button', { name: 'Save quota' }).click();
    await page.waitForFunction(
      (user) => /Quota: 0 sessions/.test(document.querySelector(`tr[data-user="${user}"] details.quota summary`)?.innerText ?? ''),
      TARGET,
    );
    await page.getByTestId('outcome').filter({ hasText: `Saved ${TARGET}'s quota: 0 sessions at a time` }).waitFor();
    await openQuota(row);
    assert.equal(await row.getByLabel('Sessions').inputValue(), '0');
    await row.getByLabel('Sessions').fill('many');
    await row.getByRole('button', { name: 'Save quota' }).click();
    await row.getByRole('alert').filter({ hasText: 'whole number' }).waitFor();
    await row.getByLabel('Sessions').fill('');
    await row.getByRole('button', { name: 'Save quota' }).click();
    await page.waitForFunction(
      (user) => !/Quota: 0 sessions/.test(document.querySelector(`tr[data-user="${user}"] details.quota summary`)?.innerText ?? 'Quota: 0 sessions'),
      TARGET,
    );

    await closeMenu(row);

    // At a hundred users a row is one line: its actions but the grant are in its menu.
    const heights = await page.locator('tr[data-user]').evaluateAll((rows) => rows.map((r) => r.getBoundingClientRect().height));
    assert.ok(Math.max(...heights) < 60, `rows of one line: ${heights}`);

    // Many at once, from a CSV file: checked first, every bad line named and nothing added;
    // corrected, applied whole, with each new account's password shown once.
    const stamp = Date.now() % 100000;
    const bulk = page.getByTestId('bulk-users');
    await bulk.locator('summary').click();
    const lines = (role) => `name,role,credits,note\ncsv-a-${stamp},user,3,course\ncsv-b-${stamp},${role}\n${TARGET},,1,e2e file\n`;
    await bulk.getByLabel('CSV file').setInputFiles({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(lines('boss')) });
    const problems = bulk.getByTestId('bulk-problems');
    await problems.waitFor();
    assert.match(await problems.innerText(), /Line 3: the role is `boss`/);
    assert.equal(await bulk.getByTestId('bulk-plan').count(), 0);
    assert.equal(await page.locator(`tr[data-user="csv-a-${stamp}"]`).count(), 0, 'nothing added');
    await page.screenshot({ path: `${ARTIFACTS}/admin-users-csv-problems.png`, fullPage: true });
    await bulk.getByLabel('or its lines').fill(lines('admin'));
    await bulk.getByRole('button', { name: 'Check' }).click();
    const plan = bulk.getByTestId('bulk-plan');
    await plan.waitFor();
    assert.match(await plan.innerText(), /3 lines: 2 accounts to add, 1 grant/);
    const had = await balanceOf(row);
    await plan.getByRole('button', { name: 'Add 2 and grant 1' }).click();
    await page.getByTestId('outcome').filter({ hasText: 'From the file: added 2 accounts and made 1 grant' }).waitFor();
    const made = page.getByTestId('made-passwords');
    await made.waitFor();
    assert.equal(await made.getByTestId('made-passwords-value').count(), 2);
    await page.locator(`tr[data-user="csv-b-${stamp}"]`).waitFor();
    await page.waitForFunction(
      ([user, expected]) =>
        parseFloat(document.querySelector(`tr[data-user="${user}"] [data-testid="balance"]`)?.innerText) === expected,
      [TARGET, had + 1],
    );
    await page.screenshot({ path: `${ARTIFACTS}/admin-users-compact.png`, fullPage: true });

    // An open ask is counted on the tab itself.
    const asker = await browser.newPage();
    await signIn(asker, TARGET);
    await asker.waitForURL(`${BASE}/`);
    const asked = await asker.evaluate(async () => (await fetch('/api/v1/me/credit-request', {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 4 }),
    })).status);
    assert.equal(asked, 200);
    await asker.close();
    await page.reload();
    await hydrated(page);
    await page.getByTestId('tab-users').filter({ hasText: /^Users \(\d+ asks?\)$/ }).waitFor();

    // Sorting and search are on the server and live in the address; a search keeps the sort.
    await page.getByRole('link', { name: 'Credits' }).click();
    await page.waitForURL(/[?&]sort=balance/);
    await page.getByRole('columnheader', { name: /Credits/ }).and(page.locator('[aria-sort="ascending"]')).waitFor();
    await page.getByLabel('Search').fill('target');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/[?&]q=target/);
    assert.match(page.url(), /[?&]sort=balance/);
    await hydrated(page);
    await page.locator(`tr[data-user="${TARGET}"]`).waitFor();
    assert.equal(await page.locator('tr[data-user]').count(), 1);
    assert.match(await page.getByTestId('pager').innerText(), /Page 1 of 1 \(1\)/);

    await page.getByRole('link', { name: 'Pool' }).click();
    await page.waitForURL(/tab=pool/);
    const gpu = page.locator('section[data-gpu]').first();
    await gpu.waitFor();
    assert.match(await gpu.innerText(), /no limit/);

    await page.getByRole('link', { name: 'Usage and cost' }).click();
    await page.waitForURL(/tab=usage/);
    await page.getByLabel('Show').waitFor();
    await page.locator('[data-testid="usage"], .empty').first().waitFor();
    // Usage per day: the period's days as the API reports them, a bar pair each; a week on ask.
    const perDay = async (filter) => {
      const chart = page.getByTestId('usage-days');
      await chart.waitFor();
      const api = await page.evaluate(async (f) => (await fetch(`/api/v1/admin/usage/days?filter=${f}`)).json(), filter);
      const drawn = await chart.locator('g.day').evaluateAll((days) => days.map((d) => Number(d.dataset.day)));
      assert.deepEqual(drawn, api.map((d) => d.day_ms), `${filter}: one bar pair per day`);
      return api;
    };
    assert.equal((await perDay('30d')).length, 30);
    await page.getByLabel('Show').selectOption('7d');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/filter=7d/);
    await page.waitForFunction(() => document.querySelector('[data-testid="usage-days"]')?.dataset.days === '7');
    assert.equal((await perDay('7d')).length, 7);

    await page.getByRole('link', { name: 'Settings' }).click();
    await page.waitForURL(/tab=settings/);
    await page.getByRole('heading', { name: 'Default quota' }).waitFor();

    // Approved images: this server runs local editors, not images, so the form says so and is
    // off; an image added through the API (as CI would) shows with its scan, and is retired.
    await page.getByRole('link', { name: 'Images', exact: true }).click();
    await page.waitForURL(/tab=images/);
    await page.getByTestId('images').waitFor();
    await page.getByTestId('images-not-run').filter({ hasText: 'not images' }).waitFor();
    assert.ok(await page.getByRole('button', { name: 'Add image' }).isDisabled(), 'no image to add here');
    const reference = `registry.example.com/team/marimo:e2e-${Date.now()}`;
    const addStatus = await page.evaluate(async (reference) => {
      const answer = await fetch('/api/v1/admin/images', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ editor: 'marimo', reference, label: 'marimo, team build' }),
      });
      return answer.status;
    }, reference);
    assert.equal(addStatus, 201);
    await page.reload();
    await hydrated(page);
    const added = page.locator(`tr[data-image="${reference}"]`);
    await added.waitFor();
    assert.match(await added.innerText(), /marimo, team build[\s\S]*by tag: can change[\s\S]*approved/);
    await added.getByText('Held back: no scan report yet').waitFor();
    // Its scan, posted as CI would (Trivy's JSON, made two days ago), shows by severity with
    // the policy's verdict.
    const trivy = readFileSync(new URL('../../server/tests/it/scans/trivy.json', import.meta.url), 'utf8')
      .replaceAll('@ARTIFACT@', reference)
      .replaceAll('@CREATED@', new Date(Date.now() - 2 * 86400000).toISOString());
    const [scanStatus, scanned] = await page.evaluate(async ({ reference, trivy }) => {
      const images = await (await fetch('/api/v1/admin/images')).json();
      const id = images.find((i) => i.reference === reference).id;
      const answer = await fetch(`/api/v1/admin/images/${id}/scans`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: trivy,
      });
      return [answer.status, await answer.json()];
    }, { reference, trivy });
    assert.equal(scanStatus, 201, JSON.stringify(scanned));
    await page.reload();
    await hydrated(page);
    await added.waitFor();
    const counts = added.getByTestId('scan-counts');
    for (const severity of ['critical', 'high', 'medium', 'low']) {
      assert.equal(
        await counts.locator(`[data-severity="${severity}"]`).innerText(),
        `${scanned.scan.found[severity]} ${severity}`,
      );
    }
    assert.match(await added.innerText(), /3 with a fix · scanned 2 days ago[\s\S]*Trivy 0\.57\.1/);
    await added.getByTestId('scan-blocked').filter({ hasText: '1 critical finding has a fix available' }).waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/admin-images.png` });
    await added.getByRole('button', { name: 'Retire' }).click();
    await added.getByText('retired').waitFor();

    await page.getByRole('link', { name: 'Audit log' }).click();
    await page.waitForURL(/tab=audit/);
    const log = page.getByTestId('audit');
    await log.waitFor();
    const text = await log.innerText();
    for (const action of ['credits.grant', 'user.lock', 'user.unlock', 'quota.set', 'session.access']) {
      assert.match(text, new RegExp(`admin\\s+${action.replace('.', '\\.')}\\s+user ${TARGET}`), action);
    }
    // The table downloads as CSV, with this browser's sign-in, every row the listing has.
    const csvLink = page.getByTestId('csv-download');
    assert.equal(await csvLink.getAttribute('href'), '/api/v1/admin/audit.csv');
    const download = await page.request.get(`${BASE}${await csvLink.getAttribute('href')}`);
    assert.equal(download.status(), 200);
    assert.match(download.headers()['content-type'], /^text\/csv/);
    const csv = await download.text();
    assert.match(csv.split('\n')[0], /^at_utc,actor,action,target,detail/);
    assert.match(csv, new RegExp(`admin,credits\\.grant,${TARGET},`));
  } finally {
    await browser.close();
  }
});

test('someone who is not an admin is refused the admin pages', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    // Moved in place: the dashboard's chunk may still be on its way (no link is no proof before).
    await page.waitForFunction(() => document.title.startsWith('Dashboard'));
    assert.equal(await page.getByRole('link', { name: 'Admin', exact: true }).count(), 0);
    await page.goto(`${BASE}/admin`);
    const alert = page.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /admins only/);
    const api = await page.evaluate(async () => (await fetch('/api/v1/admin/users')).status);
    assert.equal(api, 403);
  } finally {
    await browser.close();
  }
});
