// Shared datasets in the browser: an admin adds one on the Datasets tab (and a bad one is refused
// with its reason), the permitted user's launch form and session page name it, and it is removed.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, readyByApi, signIn } from './helpers.mjs';

// A user of its own (scripts/e2e.sh adds it): its session's charge must not touch the balance
// other tests start from.
const USER = 'e2e-data';

test('an admin adds a dataset on its tab, and its user sees it at launch and in the session', async () => {
  const folder = mkdtempSync('/var/tmp/e2e-dataset-');
  chmodSync(folder, 0o755);
  writeFileSync(`${folder}/rows.csv`, 'a,b\n1,2\n', { mode: 0o644 });
  const name = `e2e-${Date.now().toString(36)}`;
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await signIn(page, 'admin');
    await page.waitForURL(`${BASE}/`);
    await page.goto(`${BASE}/admin?tab=datasets`);
    await hydrated(page);
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByTestId('datasets').waitFor();

    const add = async (where) => {
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByLabel('Where', { exact: true }).fill(where);
      await page.getByLabel('Users', { exact: true }).fill(USER);
      await page.getByLabel('Description', { exact: true }).fill('rows for the browser test');
      await page.getByRole('button', { name: 'Add dataset' }).click();
    };
    await add(`${folder}/missing`);
    await page.getByRole('alert').filter({ hasText: 'does not exist on this server' }).waitFor();
    await add(folder);
    await page.getByTestId('outcome').filter({ hasText: `Added ${name}` }).waitFor();
    const row = page.locator(`tr[data-dataset="${name}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), new RegExp(`${folder}[\\s\\S]*${USER}`));
    await page.screenshot({ path: `${ARTIFACTS}/admin-datasets.png` });

    // The permitted user: the launch form names it, and the session's page says it is mounted.
    const user = await browser.newPage();
    await signIn(user, USER);
    await user.waitForURL(`${BASE}/`);
    await hydrated(user);
    await user.getByTestId('datasets').filter({ hasText: name }).waitFor();
    const launched = await launchByApi(user);
    try {
      await readyByApi(user, launched.id);
      await user.goto(`${BASE}/sessions/${launched.id}`);
      await hydrated(user);
      await user.getByTestId('datasets').filter({ hasText: `~/datasets: ${name}` }).waitFor();
    } finally {
      await user.evaluate(async (id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), launched.id);
    }

    await row.getByRole('button', { name: 'Remove' }).click();
    await page.getByTestId('outcome').filter({ hasText: 'Removed' }).waitFor();
    await row.waitFor({ state: 'detached' });
  } finally {
    await browser.close();
    rmSync(folder, { recursive: true, force: true });
  }
});
