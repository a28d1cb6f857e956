/* couponrush demo storefront: plain JavaScript, no build step, nothing loaded from elsewhere.
 *
 * It calls the public storefront API (/api/v1, CONTRACT.md) like any shop would. The demo shopper's token
 * comes from POST /dev/demo-shopper, which exists in development only; the shopper is kept in localStorage
 * and its token renewed before it expires.
 */
(function () {
  "use strict";

  // Django's JavaScript catalog (/i18n/js/, loaded before this file) defines gettext and interpolate in the
  // page's language; without it the words stay English. Every string a shopper reads goes through gettext().
  var gettext = window.gettext || function (msgid) { return msgid; };
  var pgettext = window.pgettext || function (context, msgid) { return msgid; };
  var interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (all, name) { return String(values[name]); });
  };
  // Named values, then "%%" as "%" (Django's interpolate leaves it: "10%% off" would show both signs).
  function fmt(text, values) { return interpolate(text, values, true).replace(/%%/g, "%"); }
  var LANG = document.documentElement.lang || undefined; // dates and money as the page's language writes them
  var RULES = window.couponrushRules || { dealText: function () { return null; }, progress: function () { return null; } };

  var API = "/api/v1";
  var TOKEN_URL = "/dev/demo-shopper";
  var STORE_KEY = "couponrush.demoShopper";
  var CAMPAIGNS_EVERY_MS = 1500;
  var COUPONS_EVERY_MS = 4000;
  var CLAIM_WAIT_SECONDS = 20; // a long poll: the server answers as soon as the coupon is issued (docs/api.md)
  var CLAIM_RETRY_MS = 1000; // after an answer that is not the claim's (a network error, a 503)
  var CLAIM_POLL_GIVE_UP_MS = 60000;

  // Business outcomes (HTTP 200, CONTRACT.md) in plain words.
  var CLAIM_WORDS = {
    claimed: gettext("Got one! Your coupon is being issued…"),
    limit_reached: gettext("You already hold as many coupons of this campaign as one shopper may."),
    sold_out: gettext("Sold out: every coupon of this campaign is gone."),
    not_started: gettext("Not open yet: the campaign has not started."),
    ended: gettext("Too late: the campaign has ended."),
    paused: gettext("The shop paused this campaign for now: try again a little later.")
  };
  var USE_WORDS = {
    redeemed: gettext("Paid! The coupon was applied to your order."),
    expired: gettext("This coupon has expired."),
    already_redeemed: gettext("This coupon was already used for another order."),
    min_spend_not_met: gettext("The order is below this coupon's minimum spend."),
    not_yet_valid: gettext("This coupon can't be used yet: its validity starts later."),
    revoked: gettext("This coupon was cancelled."),
    not_eligible: gettext("This coupon is for new shoppers only."),
    on_hold: gettext("This coupon is held for another order that is awaiting payment."),
    limit_reached: gettext("You have used this code as many times as one shopper may."),
    sold_out: gettext("This code has been used up.")
  };
  var HTTP_WORDS = {
    0: gettext("Can't reach the shop: check that the server is running."),
    400: gettext("The shop did not accept that request."),
    401: gettext("Your demo session ran out: getting a new token…"),
    404: gettext("Not found (or not yours)."),
    409: gettext("The same request is still being processed: try again in a moment."),
    413: gettext("That request is too large."),
    415: gettext("The shop expected JSON."),
    422: gettext("That request key was already used for a different request."),
    429: gettext("Too many requests: slow down a little and try again."),
    503: gettext("The shop is briefly unavailable. Nothing was changed: try again in a moment.")
  };
  var STATE_WORDS = { live: gettext("Live now"), scheduled: gettext("Starting soon"), paused: pgettext("campaign state", "Paused"), ended: pgettext("campaign state", "Ended"), draft: pgettext("campaign state", "Draft") };
  var COUPON_STATUS_WORDS = {
    active: pgettext("coupon status", "Ready to use"), held: gettext("Held for an order"), redeemed: gettext("Used"), expired: pgettext("coupon status", "Expired"), revoked: gettext("Cancelled")
  };

  var shopper = null; // {user_id, token, expires, ttl}
  var demoUnavailable = false;
  var renewTimer = null;
  var shopperRequest = null;
  var serverOffsetMs = 0; // server clock minus this browser's clock (from the Date header)
  var campaigns = [];
  var cards = {}; // campaign id -> {root, els}
  var coupons = [];
  var busy = { campaigns: false, coupons: false };

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") node.textContent = attrs[name];
      else if (name === "className") node.className = attrs[name];
      else node.setAttribute(name, attrs[name]);
    });
    for (var i = 2; i < arguments.length; i++) {
      if (arguments[i] != null) node.appendChild(arguments[i]);
    }
    return node;
  }

  function randomId() {
    var bytes = new Uint8Array(12);
    window.crypto.getRandomValues(bytes); // works on plain http too, unlike crypto.randomUUID
    return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }

  function now() { return Date.now() + serverOffsetMs; }

  function noteServerTime(response) {
    var date = Date.parse(response.headers.get("Date") || "");
    if (!isNaN(date)) {
      var offset = date - Date.now();
      serverOffsetMs = Math.abs(offset) > 1500 ? offset : 0; // the header has whole seconds only
    }
  }

  function showNotice(text, kind) {
    var notice = $("notice");
    notice.textContent = text;
    notice.className = "notice " + (kind || "info");
    notice.hidden = !text;
  }

  function httpWords(http, data) {
    var words = HTTP_WORDS[http] || fmt(gettext("The shop answered HTTP %(http)s."), { http: http });
    if (data && data.detail && http !== 0 && http !== 503) words += " " + data.detail;
    return words;
  }

  function slug(http, data) {
    var status = data && data.status ? data.status : "no answer";
    var code = data && typeof data.code === "number" ? data.code : http;
    return status + " (code " + code + (http && http !== 200 ? ", HTTP " + http : "") + ")";
  }

  // --- the demo shopper and its token -------------------------------------------------------------------

  function loadStoredShopper() {
    try {
      var stored = JSON.parse(window.localStorage.getItem(STORE_KEY) || "null");
      if (stored && typeof stored.user_id === "string" && typeof stored.token === "string") return stored;
    } catch (e) { /* unreadable: start over */ }
    return null;
  }

  function renewMarginMs(s) { return Math.max(30, Math.floor((s.ttl || 600) / 5)) * 1000; }

  function tokenFresh(s) { return s && s.expires * 1000 - Date.now() > renewMarginMs(s); }

  function requestShopper(userId) {
    // One request at a time: every caller waits for the same answer.
    if (shopperRequest) return shopperRequest;
    shopperRequest = fetch(TOKEN_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(userId ? { user_id: userId } : {}),
      cache: "no-store"
    }).then(function (response) {
      if (response.status === 404 || response.status === 405) {
        demoUnavailable = true;
        return null;
      }
      if (response.status === 400 && userId) {
        return null; // not a demo id we may renew: the caller starts a new shopper
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    }).then(function (data) {
      if (data && data.token) {
        shopper = { user_id: data.user_id, token: data.token, expires: data.expires, ttl: data.ttl };
        window.localStorage.setItem(STORE_KEY, JSON.stringify(shopper));
        scheduleRenewal();
      }
      return data;
    }).finally(function () { shopperRequest = null; });
    return shopperRequest;
  }

  function scheduleRenewal() {
    if (renewTimer) window.clearTimeout(renewTimer);
    if (!shopper) return;
    var due = shopper.expires * 1000 - renewMarginMs(shopper) - Date.now();
    renewTimer = window.setTimeout(function () { ensureToken(true).catch(function () {}); }, Math.max(due, 1000));
  }

  // Resolve to true when `shopper` holds a usable token.
  function ensureToken(force) {
    if (demoUnavailable) return Promise.resolve(false);
    if (!force && tokenFresh(shopper)) return Promise.resolve(true);
    var userId = shopper ? shopper.user_id : null;
    return requestShopper(userId).then(function (data) {
      if (data && data.token) return true;
      if (demoUnavailable) { showDemoUnavailable(); return false; }
      if (userId) return requestShopper(null).then(function (fresh) { return !!(fresh && fresh.token); });
      return false;
    });
  }

  function showDemoUnavailable() {
    showShopper();
    showNotice(gettext("The demo shopper is only available in development (DEBUG on, or COUPONS_DEMO_TOKENS=true): campaigns are shown, but grabbing and checkout need a shopper token, which a real shop mints in its own backend."), "warn");
    renderCampaigns();
    renderCoupons();
  }

  function showShopper() {
    $("shopper-id").textContent = demoUnavailable ? gettext("no demo shopper") : shopper ? shopper.user_id : "…";
    $("new-shopper").disabled = demoUnavailable || !shopper;
    $("checkout-amount").disabled = demoUnavailable;
    $("checkout-code").disabled = demoUnavailable;
  }

  function startShopper(fresh) {
    if (fresh) {
      window.localStorage.removeItem(STORE_KEY);
      shopper = null;
      coupons = [];
      renderCoupons();
      resetCheckoutResult();
      Object.keys(cards).forEach(function (id) {
        var result = cards[id].els.result;
        result.textContent = "";
        result.className = "claim-result";
        delete result.dataset.claimId;
        delete result.dataset.couponCode;
      });
    }
    return ensureToken(false).then(function (ok) {
      showShopper();
      if (ok) {
        showNotice("", "");
        refreshCoupons();
        renderCampaigns();
      }
      return ok;
    }).catch(function () {
      showNotice(gettext("Could not get a demo shopper from the server: retrying…"), "error");
      window.setTimeout(function () { startShopper(false); }, 3000);
      return false;
    });
  }

  // --- calling the API ----------------------------------------------------------------------------------

  function api(method, path, options) {
    options = options || {};
    var attempt = function (retried) {
      var ready = options.auth === false ? Promise.resolve(true) : ensureToken(false);
      return ready.then(function (ok) {
        if (!ok && options.auth !== false) return { http: 401, data: { code: 401, status: "unauthenticated" } };
        var headers = { Accept: "application/json" };
        if (options.auth !== false) {
          headers["X-User-Id"] = shopper.user_id;
          headers["X-Token"] = shopper.token;
        }
        if (options.body !== undefined) headers["Content-Type"] = "application/json";
        if (options.idempotencyKey) headers["Idempotency-Key"] = options.idempotencyKey;
        return fetch(API + path, {
          method: method, headers: headers, cache: "no-store",
          body: options.body === undefined ? undefined : JSON.stringify(options.body)
        }).then(function (response) {
          noteServerTime(response);
          return response.json().catch(function () { return null; }).then(function (data) {
            return { http: response.status, data: data || {}, replayed: response.headers.get("Idempotent-Replayed") };
          });
        }, function () {
          return { http: 0, data: { status: "network_error" } };
        }).then(function (answer) {
          if (answer.http === 401 && options.auth !== false && !retried) {
            // Same Idempotency-Key on the retry: a 401 decided nothing and was not stored.
            return ensureToken(true).then(function (ok) { return ok ? attempt(true) : answer; });
          }
          return answer;
        });
      });
    };
    return attempt(false);
  }

  // --- campaigns ----------------------------------------------------------------------------------------

  // Money as the page's language writes it, with the currency's sign or code and its minor units (Intl):
  // "CN¥350.00" in English, "¥350.00" in Simplified Chinese. The amount is the API's decimal string; a text
  // that is not a number, or a browser without Intl, shows as the API wrote it, with the currency's code.
  var MONEY_FORMATS = {};
  function money(amount, currency) {
    var value = Number(amount);
    if (amount === null || amount === undefined || amount === "" || !isFinite(value) || !window.Intl) {
      return amount + " " + currency;
    }
    try {
      var key = LANG + " " + currency;
      MONEY_FORMATS[key] = MONEY_FORMATS[key] ||
        new Intl.NumberFormat(LANG, { style: "currency", currency: currency });
      return MONEY_FORMATS[key].format(value);
    } catch (e) { // an unknown currency code
      return amount + " " + currency;
    }
  }

  function dealText(item) {
    var rich = RULES.dealText(item, money); // tiers, free shipping, buy N get M (rules.js)
    if (rich !== null) return rich;
    var min = parseFloat(item.min_spend) > 0
      ? fmt(gettext(" on orders of %(amount)s or more"), { amount: money(item.min_spend, item.currency) }) : "";
    if (item.discount_type === "percent") {
      var cap = item.max_discount
        ? fmt(gettext(" (at most %(amount)s)"), { amount: money(item.max_discount, item.currency) }) : "";
      return fmt(gettext("%(percent)s%% off"), { percent: parseFloat(item.discount_value) }) + cap + min;
    }
    return fmt(gettext("%(amount)s off"), { amount: money(item.discount_value, item.currency) }) + min;
  }

  function duration(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    var sec = s % 60;
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    if (d > 0) return fmt(gettext("%(d)sd %(h)sh %(m)sm"), { d: d, h: h, m: pad(m) });
    if (h > 0) return fmt(gettext("%(h)sh %(m)sm %(s)ss"), { h: h, m: pad(m), s: pad(sec) });
    if (m > 0) return fmt(gettext("%(m)sm %(s)ss"), { m: m, s: pad(sec) });
    return fmt(gettext("%(s)ss"), { s: sec });
  }

  // The state the page shows: the server's, moved on by the clock between two polls.
  function effectiveState(c) {
    var t = now();
    if (t >= Date.parse(c.ends_at)) return "ended";
    if (c.state === "paused") return "paused";
    if (t >= Date.parse(c.starts_at)) return "live";
    return "scheduled";
  }

  function buildCard(c) {
    var els = {
      name: el("h3", { "data-testid": "campaign-name" }),
      state: el("span", { "data-testid": "campaign-state", className: "badge" }),
      deal: el("p", { "data-testid": "campaign-deal", className: "deal" }),
      tiers: el("p", { "data-testid": "tier-progress", className: "tiers" }),
      remaining: el("strong", { "data-testid": "remaining" }),
      total: el("span", { "data-testid": "total-stock" }),
      bar: el("span", { className: "fill" }),
      countdown: el("p", { "data-testid": "countdown", className: "countdown" }),
      window: el("p", { "data-testid": "campaign-window", className: "window" }),
      grab: el("button", { type: "button", "data-testid": "grab", className: "grab", text: gettext("Grab") }),
      result: el("p", { "data-testid": "claim-result", className: "claim-result", "aria-live": "polite" })
    };
    // "<remaining> of <total> left": the words around the two figures, in the page's language.
    var stock = el("p", { className: "stock" }, els.remaining, document.createTextNode(pgettext("stock", " of ")),
      els.total, document.createTextNode(pgettext("stock", " left")));
    var root = el("article", { className: "card", id: "campaign-" + c.id, "data-testid": "campaign",
      "data-campaign-id": String(c.id) },
      el("div", { className: "card-head" }, els.name, els.state),
      els.deal, els.tiers, stock, el("div", { className: "bar" }, els.bar), els.countdown, els.window, els.grab, els.result);
    els.grab.addEventListener("click", function () { grab(c.id, els); });
    return { root: root, els: els };
  }

  function renderCampaigns() {
    var container = $("campaigns");
    var seen = {};
    campaigns.forEach(function (c, index) {
      seen[c.id] = true;
      var card = cards[c.id];
      if (!card) {
        card = cards[c.id] = buildCard(c);
      }
      if (container.children[index] !== card.root) { // the server's order (soonest first)
        container.insertBefore(card.root, container.children[index] || null);
      }
      updateCard(c, card.els);
    });
    Object.keys(cards).forEach(function (id) {
      if (!seen[id]) { cards[id].root.remove(); delete cards[id]; }
    });
    $("campaigns-empty").hidden = campaigns.length > 0 || !$("campaigns-error").hidden;
  }

  function updateCard(c, els) {
    var state = effectiveState(c);
    els.name.textContent = c.name;
    els.state.textContent = STATE_WORDS[state] || state;
    els.state.className = "badge " + state;
    els.deal.textContent = dealText(c) + " · " + fmt(gettext("%(limit)s per shopper"), { limit: c.per_user_limit });
    var ladder = RULES.progress(c, cartTotal(), money); // a tiers rule: the tier the cart reaches, what is left
    els.tiers.textContent = ladder ? ladder.text : "";
    els.tiers.hidden = !ladder;
    if (ladder) els.tiers.dataset.left = ladder.left || "";
    els.remaining.textContent = c.remaining === null ? "?" : String(c.remaining);
    els.total.textContent = String(c.total_stock);
    var share = c.remaining === null || !c.total_stock ? 0 : Math.min(1, c.remaining / c.total_stock);
    els.bar.style.width = (share * 100).toFixed(1) + "%";
    var t = now();
    if (state === "scheduled") {
      els.countdown.textContent = fmt(gettext("Opens in %(time)s"), { time: duration(Date.parse(c.starts_at) - t) });
    } else if (state === "ended") els.countdown.textContent = pgettext("campaign state", "Ended");
    else els.countdown.textContent = fmt(gettext("Ends in %(time)s"), { time: duration(Date.parse(c.ends_at) - t) });
    els.window.textContent = new Date(c.starts_at).toLocaleString(LANG) + " → " +
      new Date(c.ends_at).toLocaleString(LANG);
    var soldOut = c.remaining === 0;
    if (!els.grab.dataset.busy) {
      els.grab.disabled = demoUnavailable || !shopper || state !== "live" || soldOut;
      els.grab.textContent = soldOut ? gettext("Sold out") : state === "scheduled" ? gettext("Not open yet")
        : state === "paused" ? pgettext("campaign state", "Paused")
        : state === "ended" ? pgettext("campaign state", "Ended") : gettext("Grab");
    }
  }

  function tickCountdowns() {
    campaigns.forEach(function (c) { if (cards[c.id]) updateCard(c, cards[c.id].els); });
  }

  function refreshCampaigns() {
    if (busy.campaigns) return Promise.resolve();
    busy.campaigns = true;
    return api("GET", "/campaigns", { auth: false }).then(function (answer) {
      var error = $("campaigns-error");
      if (answer.http === 200 && Array.isArray(answer.data.results)) {
        // grab campaigns only: a codes campaign's code is typed at the checkout, it can't be grabbed
        campaigns = answer.data.results.filter(function (c) { return c.kind !== "codes"; });
        error.hidden = true;
      } else {
        error.textContent = fmt(gettext("Can't load the campaigns right now: %(why)s Retrying…"),
          { why: httpWords(answer.http, answer.data) });
        error.hidden = false;
      }
      renderCampaigns();
    }).finally(function () { busy.campaigns = false; });
  }

  function grab(campaignId, els) {
    var key = "grab-" + randomId(); // one key per click: a network retry of this click can't claim twice
    els.grab.dataset.busy = "1";
    els.grab.disabled = true;
    els.grab.textContent = gettext("Grabbing…");
    els.result.className = "claim-result";
    els.result.textContent = "";
    api("POST", "/campaigns/" + campaignId + "/claim", { idempotencyKey: key }).then(function (answer) {
      var data = answer.data;
      if (answer.http === 200 && data.code === 0) {
        els.result.className = "claim-result ok";
        els.result.textContent = CLAIM_WORDS.claimed;
        els.result.dataset.claimId = data.claim_id;
        followClaim(data.claim_id, els);
      } else if (answer.http === 200) {
        els.result.className = "claim-result refused";
        els.result.textContent = (CLAIM_WORDS[data.status] || gettext("Not claimed.")) + " [" + slug(200, data) + "]";
      } else {
        els.result.className = "claim-result error";
        els.result.textContent = httpWords(answer.http, data) + " [" + slug(answer.http, data) + "]";
      }
    }).finally(function () {
      delete els.grab.dataset.busy;
      refreshCampaigns(); // remaining goes down at once, not at the next poll
    });
  }

  // A claim is an async order: long-poll it (GET /claims/{id}?wait=S) until the drain has made it a coupon in
  // PostgreSQL. The server holds each request until the claim settles or S seconds pass: one request a claim,
  // usually, where polling every 400 ms took a few.
  function followClaim(claimId, els) {
    var started = Date.now();
    var owner = shopper && shopper.user_id;
    var poll = function () {
      if (!shopper || shopper.user_id !== owner) return; // "New shopper" was pressed meanwhile
      var asked = Date.now();
      api("GET", "/claims/" + encodeURIComponent(claimId) + "?wait=" + CLAIM_WAIT_SECONDS).then(function (answer) {
        var data = answer.data;
        if (!shopper || shopper.user_id !== owner) return;
        if (answer.http === 404) {
          els.result.className = "claim-result error";
          els.result.textContent = fmt(gettext("This claim is unknown to the shop (%(claim)s)."), { claim: claimId });
          return;
        }
        if (answer.http === 200 && data.status === "issued" && data.coupon) {
          els.result.className = "claim-result ok";
          els.result.textContent = fmt(gettext("Coupon %(code)s is yours: see My coupons."), { code: data.coupon.code });
          els.result.dataset.couponCode = data.coupon.code;
          refreshCoupons();
          return;
        }
        if (answer.http === 200 && (data.status === "cancelled" || data.status === "failed")) {
          els.result.className = "claim-result refused";
          els.result.textContent = data.status === "cancelled" ? gettext("The claim was cancelled: no coupon was issued.")
            : gettext("The claim failed: no coupon was issued.");
          return;
        }
        if (Date.now() - started > CLAIM_POLL_GIVE_UP_MS) {
          els.result.textContent = fmt(gettext("Your coupon is still being issued (claim %(claim)s); it will appear under My coupons once it is."), { claim: claimId });
          return;
        }
        if (answer.http === 200) {
          els.result.textContent = fmt(gettext("Claimed! Issuing your coupon… (claim %(claim)s)"), { claim: claimId });
          // still pending after the server's wait: wait again at once (a server that did not wait: in a second)
          window.setTimeout(poll, Date.now() - asked >= CLAIM_WAIT_SECONDS * 500 ? 0 : CLAIM_RETRY_MS);
          return;
        }
        window.setTimeout(poll, CLAIM_RETRY_MS);
      });
    };
    poll();
  }

  // --- my coupons ---------------------------------------------------------------------------------------

  function campaignName(id) {
    for (var i = 0; i < campaigns.length; i++) if (campaigns[i].id === id) return campaigns[i].name;
    return fmt(gettext("Campaign #%(id)s"), { id: id });
  }

  function refreshCoupons() {
    if (busy.coupons || !shopper || demoUnavailable) return Promise.resolve();
    busy.coupons = true;
    return api("GET", "/me/coupons?page_size=50").then(function (answer) {
      if (answer.http === 200 && Array.isArray(answer.data.results)) {
        coupons = answer.data.results;
        renderCoupons();
      }
    }).finally(function () { busy.coupons = false; });
  }

  function renderCoupons() {
    var body = $("coupons-body");
    body.textContent = "";
    coupons.forEach(function (c) {
      var use = el("button", { type: "button", className: "link", "data-testid": "use-coupon", text: gettext("Use") });
      use.disabled = c.status !== "active";
      use.addEventListener("click", function () {
        $("checkout-coupon").value = c.code;
        onCouponChosen();
        $("checkout-amount").focus();
      });
      var status = el("span", { className: "status " + c.status, "data-testid": "coupon-status",
        "data-status": c.status, text: COUPON_STATUS_WORDS[c.status] || c.status });
      body.appendChild(el("tr", { "data-testid": "coupon", "data-code": c.code, id: "coupon-" + c.code },
        el("td", {}, el("code", { "data-testid": "coupon-code", text: c.code })),
        el("td", { text: campaignName(c.campaign_id) }),
        el("td", { text: dealText(c) }),
        el("td", {}, status),
        el("td", { text: c.expires_at ? new Date(c.expires_at).toLocaleString(LANG) : "" }),
        el("td", {}, use)));
    });
    $("coupons").hidden = coupons.length === 0;
    $("coupons-empty").hidden = coupons.length > 0;
    $("coupons-empty").textContent = demoUnavailable ? gettext("Coupons need a demo shopper (development only).")
      : gettext("No coupons yet: grab one above.");
    renderCheckoutChoices();
  }

  // --- the pretend checkout -----------------------------------------------------------------------------

  function usableCoupons() { return coupons.filter(function (c) { return c.status === "active"; }); }

  function findCoupon(code) {
    for (var i = 0; i < coupons.length; i++) if (coupons[i].code === code) return coupons[i];
    return null;
  }

  function renderCheckoutChoices() {
    var select = $("checkout-coupon");
    var chosen = select.value;
    var usable = usableCoupons();
    select.textContent = "";
    if (usable.length === 0) {
      select.appendChild(el("option", { value: "", text: gettext("No usable coupon yet") }));
    }
    usable.forEach(function (c) {
      select.appendChild(el("option", { value: c.code, text: c.code + " · " + dealText(c) }));
    });
    if (usable.some(function (c) { return c.code === chosen; })) select.value = chosen;
    select.disabled = usable.length === 0;
    onCouponChosen();
  }

  function typedCode() { return $("checkout-code").value.trim(); }

  function onCouponChosen() {
    var coupon = findCoupon($("checkout-coupon").value);
    var typed = typedCode();
    // A typed code (a shared code such as SAVE50, or a unique code) goes before the chosen coupon.
    $("checkout-currency").textContent = typed ? "CNY" : (coupon ? coupon.currency : "—");
    $("checkout-submit").disabled = (!typed && (!coupon || coupon.status !== "active")) ||
      !!$("checkout").dataset.busy;
  }

  function resetCheckoutResult() {
    $("checkout-result").hidden = true;
  }

  function showCheckoutResult(kind, message, statusText, figures) {
    $("checkout-result").hidden = false;
    $("checkout-result").className = "result " + kind;
    $("checkout-message").textContent = message;
    $("checkout-status").textContent = statusText;
    $("checkout-figures").hidden = !figures;
    if (figures) {
      $("checkout-order").textContent = figures.order;
      $("checkout-discount").textContent = figures.discount;
      $("checkout-payable").textContent = figures.payable;
    }
  }

  function checkout(event) {
    event.preventDefault();
    var typed = typedCode();
    var coupon = typed ? null : findCoupon($("checkout-coupon").value);
    var code = typed || (coupon && coupon.code);
    var currency = coupon ? coupon.currency : "CNY"; // the demo's campaigns are in CNY
    var amount = $("checkout-amount").value.trim();
    if (!code) return;
    if (!amount) {
      showCheckoutResult("refused", gettext("Type the order amount first, e.g. 350.00."), "");
      return;
    }
    var form = $("checkout");
    form.dataset.busy = "1";
    $("checkout-submit").disabled = true;
    $("checkout-submit").textContent = gettext("Paying…");
    var order = { order_id: "demo-" + Date.now() + "-" + randomId().slice(0, 6), order_amount: amount,
      currency: currency };
    // One Idempotency-Key per click: a retry of this click can't use the coupon twice.
    api("POST", "/coupons/" + encodeURIComponent(code) + "/redeem",
      { body: order, idempotencyKey: "pay-" + randomId() }).then(function (answer) {
      var data = answer.data;
      if (answer.http === 200 && data.code === 0) {
        showCheckoutResult("ok", USE_WORDS.redeemed + " " + fmt(gettext("Order %(order)s."), { order: order.order_id }), slug(200, data), {
          order: money(amount, currency),
          discount: money(data.discount, currency),
          payable: money(data.payable, currency)
        });
      } else if (answer.http === 200) {
        var words = USE_WORDS[data.status] || data.detail || gettext("The coupon was not applied.");
        if (data.status === "min_spend_not_met" && coupon) {
          words = fmt(gettext("The order is below this coupon's minimum spend of %(spend)s: add %(missing)s more to use it."), {
            spend: money(coupon.min_spend, coupon.currency),
            missing: money((parseFloat(coupon.min_spend) - parseFloat(amount)).toFixed(2), coupon.currency)
          });
          if (isNaN(parseFloat(amount))) words = USE_WORDS.min_spend_not_met;
        }
        showCheckoutResult("refused", words + " " + gettext("Nothing was charged."), slug(200, data));
      } else {
        showCheckoutResult("error", httpWords(answer.http, data), slug(answer.http, data));
      }
    }).finally(function () {
      delete form.dataset.busy;
      $("checkout-submit").textContent = gettext("Pay with coupon");
      refreshCoupons().then(onCouponChosen);
    });
  }

  // --- the cart: validate asks which coupons apply and the best set; pay reserves and confirms each ---------

  var CART = [
    { sku: "TEA-1", category: "tea", quantity: 2, unit_price: "120.00" },
    { sku: "CUP-9", category: "kitchen", quantity: 1, unit_price: "60.00" },
    { sku: "BOOK-3", category: "books", quantity: 1, unit_price: "80.00" }
  ];
  var cartBest = null;

  function renderCart() {
    var body = $("cart-body");
    body.textContent = "";
    CART.forEach(function (line, index) {
      var quantity = el("input", { type: "number", min: "1", max: "99", value: String(line.quantity),
        "data-testid": "cart-quantity", "aria-label": fmt(gettext("Quantity of %(sku)s"), { sku: line.sku }) });
      quantity.addEventListener("change", function () {
        line.quantity = Math.max(1, parseInt(quantity.value, 10) || 1);
        cartBest = null;
        $("cart-pay").disabled = true;
        renderCampaigns(); // a tiers campaign's progress follows the cart
      });
      body.appendChild(el("tr", { "data-testid": "cart-line", id: "cart-line-" + index },
        el("td", {}, el("code", { text: line.sku })), el("td", { text: line.category }),
        el("td", {}, quantity), el("td", { text: money(line.unit_price, "CNY") })));
    });
  }

  function cartTotal() { // the cart's amount, as decimal text (whole hundredths: no float drift)
    return (CART.reduce(function (sum, l) {
      return sum + l.quantity * Math.round(parseFloat(l.unit_price) * 100);
    }, 0) / 100).toFixed(2);
  }

  function cartLines() {
    return CART.map(function (l) {
      return { sku: l.sku, category: l.category, quantity: l.quantity, unit_price: l.unit_price };
    });
  }

  function validateCart() {
    var body = { currency: "CNY", lines: cartLines() };
    if (typedCode()) body.codes = [typedCode()];
    $("cart-validate").disabled = true;
    return api("POST", "/carts/validate", { body: body }).then(function (answer) {
      $("cart-result").hidden = false;
      if (answer.http !== 200) {
        $("cart-message").textContent = httpWords(answer.http, answer.data);
        return;
      }
      var list = $("cart-coupons");
      list.textContent = "";
      answer.data.coupons.forEach(function (c) {
        list.appendChild(el("li", { "data-testid": "cart-coupon", "data-code": c.code, "data-status": c.status,
          text: c.code + ": " + (c.applicable ? fmt(gettext("%(amount)s off"), { amount: money(c.discount, "CNY") }) : c.status) }));
      });
      cartBest = answer.data.best;
      $("cart-best-codes").textContent = cartBest.codes.join(" + ") || gettext("none");
      $("cart-best-discount").textContent = money(cartBest.discount, "CNY");
      $("cart-best-payable").textContent = money(cartBest.payable, "CNY");
      $("cart-message").textContent = "";
      $("cart-pay").disabled = cartBest.codes.length === 0;
    }).finally(function () { $("cart-validate").disabled = false; });
  }

  function payCart() {
    if (!cartBest || cartBest.codes.length === 0) return;
    var orderId = "cart-" + Date.now() + "-" + randomId().slice(0, 6);
    var codes = cartBest.codes.slice();
    var lines = cartLines();
    var last = null;
    $("cart-pay").disabled = true;
    // Reserve each of best's codes in best's order (that order gives exactly best.discount), then confirm each.
    var step = codes.reduce(function (chain, code) {
      return chain.then(function (ok) {
        if (!ok) return false;
        return api("POST", "/coupons/" + encodeURIComponent(code) + "/reserve", {
          body: { order_id: orderId, currency: "CNY", lines: lines }, idempotencyKey: "hold-" + randomId()
        }).then(function (answer) {
          if (answer.http === 200 && answer.data.code === 0) { last = answer.data; return true; }
          $("cart-message").textContent = code + ": " + (USE_WORDS[(answer.data || {}).status] ||
            httpWords(answer.http, answer.data)) + " " + gettext("Nothing was charged.");
          return false;
        });
      });
    }, Promise.resolve(true));
    step.then(function (ok) {
      if (!ok) {
        return Promise.all(codes.map(function (code) {
          return api("POST", "/coupons/" + encodeURIComponent(code) + "/release", { body: { order_id: orderId } });
        }));
      }
      return Promise.all(codes.map(function (code) {
        return api("POST", "/coupons/" + encodeURIComponent(code) + "/confirm", { body: { order_id: orderId } });
      })).then(function () {
        $("cart-message").textContent = fmt(gettext("Paid %(amount)s for order %(order)s with %(codes)s."),
          { amount: money(last.payable, "CNY"), order: orderId, codes: codes.join(" + ") });
        $("cart-message").dataset.payable = last.payable;
      });
    }).finally(function () {
      cartBest = null;
      refreshCoupons();
    });
  }

  // --- start --------------------------------------------------------------------------------------------

  function every(ms, fn) {
    window.setInterval(function () { if (!document.hidden) fn(); }, ms);
  }

  document.addEventListener("DOMContentLoaded", function () {
    shopper = loadStoredShopper();
    showShopper();
    $("new-shopper").addEventListener("click", function () { startShopper(true); });
    $("checkout-coupon").addEventListener("change", onCouponChosen);
    $("checkout-code").addEventListener("input", onCouponChosen);
    $("checkout").addEventListener("submit", checkout);
    renderCart();
    $("cart-validate").addEventListener("click", validateCart);
    $("cart-pay").addEventListener("click", payCart);
    refreshCampaigns();
    startShopper(false);
    every(CAMPAIGNS_EVERY_MS, refreshCampaigns);
    every(COUPONS_EVERY_MS, refreshCoupons);
    every(250, tickCountdowns);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) { refreshCampaigns(); refreshCoupons(); }
    });
  });
})();
