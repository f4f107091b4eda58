// Accounts from the admin pages: an admin adds a user and hands over the password shown once;
// the newcomer signs in, is sent to choose their own first and then on to the page they asked
// for; a reset and a delete each ask before they act.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, signIn } from './helpers.mjs';

// Opens a row's menu (its actions but the grant), unless it is open already.
async function openMenu(row) {
  const menu = row.locator('details.row-menu');
  if ((await menu.getAttribute('open')) === null) {
    await menu.locator(':scope > summary').click();
  }
}

test('an added user signs in with the shown password, chooses their own, and is reset and deleted', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  const context = await browser.newContext();
  const newcomer = await context.newPage();
  try {
    await signIn(page, 'admin');
    await page.waitForURL(`${BASE}/`);
    await page.goto(`${BASE}/admin`);
    await hydrated(page);
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.locator('tr[data-user]').first().waitFor();
    assert.equal(await page.title(), 'Users · Admin · GPU Sandbox');

    const name = `newcomer-${Date.now() % 100000}`;
    const form = page.getByTestId('add-user');
    await form.locator('summary').click();
    await form.getByLabel('Name').fill(name);
    await form.getByRole('button', { name: 'Add user' }).click();
    const shown = page.getByTestId('made-password-value');
    await shown.waitFor();
    const given = await shown.inputValue();
    assert.ok(given.length >= 12, given);
    const row = page.locator(`tr[data-user="${name}"]`);
    await row.getByText('new password').waitFor();

    // A deep link, through sign-in and the password change, back to where it led.
    await newcomer.goto(`${BASE}/tokens`);
    await newcomer.waitForURL(/\/login\?next=/);
    await hydrated(newcomer);
    await newcomer.getByLabel('User name').fill(name);
    await newcomer.getByLabel('Password').fill(given);
    await newcomer.getByRole('button', { name: 'Sign in' }).click();
    await newcomer.waitForURL(/\/account\?next=/);
    await hydrated(newcomer);
    await newcomer.getByTestId('must-change').waitFor();
    assert.equal(await newcomer.title(), 'Your account · GPU Sandbox');
    // Nothing else opens meanwhile.
    const refused = await newcomer.evaluate(async () => (await fetch('/api/v1/sessions')).json());
    assert.equal(refused.error, 'password_change_required');
    await newcomer.getByLabel('Current password').fill(given);
    await newcomer.getByLabel('New password', { exact: true }).fill('my-own-password');
    await newcomer.getByLabel('New password again').fill('my-own-passwort');
    await newcomer.getByText('The two new passwords differ.').waitFor();
    assert.ok(await newcomer.getByRole('button', { name: 'Change password' }).isDisabled());
    await newcomer.getByLabel('New password again').fill('my-own-password');
    await newcomer.getByRole('button', { name: 'Change password' }).click();
    await newcomer.waitForURL(`${BASE}/tokens`);
    await newcomer.getByRole('heading', { name: 'API tokens' }).waitFor();
    await newcomer.screenshot({ path: `${ARTIFACTS}/account-changed.png` });

    // The admin's list no longer says "new password"; a grant's note reaches the newcomer's
    // history, and the audit log, in credits.
    // First the newcomer asks for them from the dashboard.
    await newcomer.goto(`${BASE}/`);
    await hydrated(newcomer);
    const ask = newcomer.getByTestId('ask-credits');
    await ask.getByLabel('Credits').fill('5');
    await ask.getByLabel('What for').fill('the course project');
    await ask.getByRole('button', { name: 'Ask an admin' }).click();
    assert.match(await ask.getByTestId('open-ask').innerText(), /You asked for 5 credits on .*the course project/);

    await page.reload();
    await hydrated(page);
    await row.waitFor();
    assert.equal(await row.getByText('new password').count(), 0);
    // The admin's own row offers no way to demote, lock or delete themselves.
    const own = page.locator('tr[data-user="admin"]');
    await own.getByText('you', { exact: true }).waitFor();
    assert.equal(await own.getByRole('button', { name: /^(Lock|Make user|Delete)/ }).count(), 0);
    // The ask shows in the row and fills the grant in.
    assert.match(await row.getByTestId('credit-ask').innerText(), /Asks for 5 credits .*the course project/);
    const amount = row.getByLabel(`Credits to grant ${name}`);
    assert.equal(await amount.inputValue(), '5');
    // A refusal is replaced by the next answer, never left beside it.
    await amount.fill('lots');
    await row.getByRole('button', { name: 'Grant' }).click();
    const outcome = page.getByTestId('outcome');
    await outcome.filter({ hasText: "'lots' is not an amount" }).waitFor();
    assert.equal(await outcome.getAttribute('role'), 'alert');
    await amount.fill('5');
    await row.getByLabel(`Note for ${name}`).fill('for the course');
    await row.getByRole('button', { name: 'Grant' }).click();
    await outcome.filter({ hasText: `Granted ${name} 5 credits. Their balance is now 105 credits.` }).waitFor();
    assert.equal(await outcome.getAttribute('role'), 'status');
    assert.equal(await page.getByRole('alert').count(), 0);
    await newcomer.goto(`${BASE}/`);
    await hydrated(newcomer);
    assert.equal(await newcomer.getByTestId('open-ask').count(), 0, 'the grant answered the ask');
    // Asked again, then withdrawn: a plain form, after which the dashboard loads anew without it.
    await ask.getByLabel('Credits').fill('3');
    await ask.getByRole('button', { name: 'Ask an admin' }).click();
    await ask.getByTestId('open-ask').waitFor();
    await ask.getByRole('button', { name: 'Withdraw the ask' }).click();
    await ask.getByLabel('Credits').waitFor();
    await hydrated(newcomer);
    assert.equal(await newcomer.getByTestId('open-ask').count(), 0, 'withdrawn');
    const withdrawn = await newcomer.evaluate(async () => (await fetch('/api/v1/me')).json());
    assert.equal(withdrawn.credits.request ?? null, null, 'the API has no open ask either');
    // The balance line ends at the balance the API reports (milli-credits), 105 credits.
    const me = await newcomer.evaluate(async () => (await fetch('/api/v1/me')).json());
    assert.equal(me.credits.balance, 105_000);
    assert.equal(await newcomer.getByTestId('balance-line').getAttribute('data-last-balance'), String(me.credits.balance));
    // A new account's line starts at its first grant, not with a month of zero before it.
    const points = Number(await newcomer.getByTestId('balance-line').getAttribute('data-points'));
    assert.ok(points >= 2 && points <= 3, `from today's first grant to now: ${points} points`);
    await newcomer.screenshot({ path: `${ARTIFACTS}/dashboard-balance-line.png`, fullPage: true });
    const history = newcomer.getByTestId('credit-history');
    await history.locator('summary').click();
    const granted = history.locator('tr[data-kind="grant"]').first();
    assert.match(await granted.innerText(), /Granted\s+\+5\s+.*for the course/);
    // The dashboard's reloads bring what the server drew anew: a second grant reaches the history,
    // which stays open meanwhile.
    await amount.fill('1');
    await row.getByLabel(`Note for ${name}`).fill('one more');
    await row.getByRole('button', { name: 'Grant' }).click();
    await outcome.filter({ hasText: `Granted ${name} 1 ` }).waitFor();
    await history.locator('tr[data-kind="grant"]', { hasText: 'one more' }).waitFor({ timeout: 60_000 });
    assert.equal(await history.getAttribute('open'), '', 'the credit history stayed open');
    await page.goto(`${BASE}/admin?tab=audit&q=credits.grant`);
    await page.getByText(/\+5 credits: .*for the course/).first().waitFor();
    await page.goto(`${BASE}/admin`);
    await row.waitFor();
    await openMenu(row);
    await row.getByRole('button', { name: `Reset password of ${name}` }).click();
    assert.match(page.dialogs.at(-1) ?? '', new RegExp(`^Give ${name} a new password\\?`));
    await page.getByTestId('made-password').filter({ hasText: name }).waitFor();
    const reset = await page.getByTestId('made-password-value').inputValue();
    assert.notEqual(reset, given);
    // Copied with its button: the clipboard holds it.
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
    await page.getByRole('button', { name: `Copy password of ${name}` }).click();
    await page.getByTestId('made-password').getByRole('status').filter({ hasText: 'Copied.' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), reset);
    await row.getByText('new password').waitFor();

    // The newcomer's open page is held to the new change at its next load.
    await newcomer.goto(`${BASE}/`);
    await newcomer.waitForURL(/\/account\?next=/);

    // Deleting asks what is lost; the account leaves the list and its sign-in ends.
    await openMenu(row);
    await row.getByRole('button', { name: `Delete ${name}` }).click();
    assert.match(page.dialogs.at(-1) ?? '', new RegExp(`^Delete ${name}\\? They can no longer sign in`));
    await row.waitFor({ state: 'detached' });
    // The password belonged to the reset: the next action took it off the page.
    assert.equal(await page.getByTestId('made-password').count(), 0, 'the password is gone');
    assert.equal(await page.getByText(reset).count(), 0);
    await newcomer.goto(`${BASE}/`);
    await newcomer.waitForURL(/\/login/);
    await hydrated(newcomer);
    await newcomer.getByLabel('User name').fill(name);
    await newcomer.getByLabel('Password').fill(reset);
    await newcomer.getByRole('button', { name: 'Sign in' }).click();
    await newcomer.getByTestId('login-error').waitFor();

    // Within its grace period the deletion is undone from the filter "deleted": the account
    // is back in the list and signs in again.
    await page.getByLabel('Show').selectOption('deleted');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/filter=deleted/);
    await hydrated(page);
    const gone = page.locator(`tr[data-user="${name}"]`);
    assert.match(await gone.getByTestId('storage-removed').innerText(), /^Workspace removed on \d{4}-\d\d-\d\d/);
    await gone.getByRole('button', { name: `Undo the deletion of ${name}` }).click();
    await page.getByTestId('outcome').filter({ hasText: `${name} is back` }).waitFor();
    await gone.waitFor({ state: 'detached' });
    await page.getByLabel('Show').selectOption('all');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.locator(`tr[data-user="${name}"]`).waitFor();
    await newcomer.getByLabel('User name').fill(name);
    await newcomer.getByLabel('Password').fill(reset);
    await newcomer.getByRole('button', { name: 'Sign in' }).click();
    await newcomer.waitForURL((url) => !url.pathname.startsWith('/login'));
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}/accounts-failure.png` }).catch(() => {});
    await newcomer.screenshot({ path: `${ARTIFACTS}/accounts-newcomer-failure.png` }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
});
