// The launch form's idle timeout is checked in the page, by the rule the server uses, before
// anything is sent: the bounds in words beside the field, the reason in the form, no launch request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { ARTIFACTS, BASE, hydrated, launchBrowser, signIn } from './helpers.mjs';

mkdirSync(ARTIFACTS, { recursive: true });

test('an idle timeout outside the size\'s bounds is refused in the form, unsent', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  const launches = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && /\/launch(\?|$)/.test(new URL(request.url()).pathname)) {
      launches.push(request.url());
    }
  });
  try {
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    const slice = page.getByTestId('slice-choice').filter({ hasText: /^8 GB/ });
    await slice.getByRole('radio').check();
    const form = page.getByTestId('launch-form');
    // The default 8 GB bounds: 10 to 120 minutes, 30 if left empty.
    await form.getByText('10 to 120 minutes without work (30 if left empty)').waitFor();
    const field = page.getByTestId('idle-minutes');
    await field.fill('121');
    await form.getByRole('button', { name: 'Launch' }).click();
    const refused = page.getByTestId('launch-refused');
    await refused.waitFor({ timeout: 5_000 });
    assert.equal(
      await refused.innerText(),
      'The idle timeout must be between 10 and 120 minutes for this size, not 121.',
    );
    assert.equal(await field.getAttribute('aria-invalid'), 'true');
    // Text that is no number is refused the same way, never launched with the default.
    await field.fill('soon');
    await refused.waitFor({ state: 'detached' });
    await form.getByRole('button', { name: 'Launch' }).click();
    await refused.waitFor();
    assert.match(await refused.innerText(), /between 10 and 120 minutes for this size, not 0\.$/);
    await page.screenshot({ path: `${ARTIFACTS}/idle-refused.png` });
    assert.deepEqual(launches, [], 'nothing was sent');
    // Typing again clears it; a value within the bounds leaves nothing to say.
    await field.fill('45');
    await refused.waitFor({ state: 'detached' });
    assert.equal(await field.getAttribute('aria-invalid'), 'false');
  } finally {
    await browser.close();
  }
});
